//! What a user reads when `.retry(..)` is given to a map it does not fit. The compiler's own
//! wording changes between toolchains, so this only looks for tollgate's words (set with
//! `#[diagnostic::on_unimplemented]`) and checks that no private trait is the message.
//!
//! It builds a small crate that depends on this one, in a target dir of its own under
//! cargo's temporary dir (reused by later runs), offline: every dependency is in the lock
//! file of this workspace already.

use std::path::Path;
use std::process::Command;

const MAIN: &str = r#"
#[derive(Debug)]
struct Row(u32); // not Clone

fn main() {
    futures_lite::future::block_on(async {
        let not_a_result = tollgate::map_async(0..8u32, 4, |n| async move { n * 2 })
            .retry(tollgate::RetryPolicy::<u32, ()>::new())
            .await;
        let not_clone = tollgate::map_async((0..8).map(Row), 4, |row| async move { Ok::<u32, ()>(row.0) })
            .retry(tollgate::RetryPolicy::new())
            .await;
        let _ = (not_a_result, not_clone);
    });
}
"#;

#[test]
fn retry_on_a_map_it_does_not_fit_says_what_to_do() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diagnostics");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"retry-misuse\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n\
         [dependencies]\ntollgate = {{ path = {:?} }}\nfutures-lite = \"2\"\n\n[workspace]\n",
        root.display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), MAIN).unwrap();
    // The workspace's lock file pins the same versions, so nothing is fetched.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["check", "--offline", "--quiet", "--color", "never"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the misuse compiled:\n{stderr}");
    for expected in [
        "`.retry(policy)` needs a map whose function returns a `Result` (this one returns `u32`)",
        "`.retry(policy)` needs items that are `Clone` (`Row` is not)",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    for line in stderr.lines().filter(|line| line.starts_with("error")) {
        assert!(
            !line.contains("Attempts") && !line.contains("RetryItem"),
            "an error's message names a private trait: {line}"
        );
    }
}
