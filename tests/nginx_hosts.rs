//! The testkit's nginx hosts do what their plans say, measured at nginx and at the upstream
//! behind it: a connection cap never exceeded, a burst and a rate, a `RateLimit-Policy` on
//! every answer, a host that is down answering `503` with `Retry-After` and coming back. The
//! crawls that prove tollgate against nginx stand on these; what is asserted holds at any
//! speed (a cap counted at the server, a meter's bound that grows with the time the test
//! took), so a busy machine cannot change the verdict.
//!
//! The requests are plain blocking `GET`s, one per connection, from threads started together.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use tollgate_testkit::http_server::TestServer;
use tollgate_testkit::nginx::{HostPlan, Nginx};

/// A `GET /` of `addr`: the status and the value of `header` (lowercase name), if sent.
fn get(addr: SocketAddr, header: &str) -> (u16, Option<String>) {
    let mut stream = TcpStream::connect(addr).expect("connect to nginx");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the answer");
    let (head, _) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|status| status.parse().ok())
        .unwrap_or(0);
    let value = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case(header)
            .then(|| value.trim().to_owned())
    });
    (status, value)
}

/// `count` `GET`s of `addr` sent together from as many threads: their statuses.
fn together(addr: SocketAddr, count: usize) -> Vec<u16> {
    let barrier = Barrier::new(count);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..count)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    get(addr, "").0
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a request thread"))
            .collect()
    })
}

#[test]
fn a_connection_cap_is_never_exceeded_at_the_upstream() {
    let upstream = TestServer::builder()
        .host("slow", Duration::from_millis(200))
        .start();
    let nginx = Nginx::start_plans(&[HostPlan::new("capped")
        .conn(2)
        .upstream(upstream.addr("slow"))]);
    let statuses = together(nginx.addr("capped"), 8);
    let passed = statuses.iter().filter(|status| **status == 200).count();
    let stats = upstream.stats("slow");
    println!(
        "statuses {statuses:?}; at the upstream: peak {}, {} answered",
        stats.peak, stats.ok
    );
    assert!(stats.peak <= 2, "the upstream held {} at once", stats.peak);
    assert!(passed >= 1, "nothing got through: {statuses:?}");
    assert_eq!(passed, stats.ok, "every 200 came from the upstream");
    assert!(
        statuses
            .iter()
            .all(|status| *status == 200 || *status == 503),
        "a capped request is a bare 503: {statuses:?}"
    );
    // nginx logged every request, with the same statuses.
    let mut logged: Vec<u16> = nginx
        .statuses("capped")
        .iter()
        .map(|line| line.status)
        .collect();
    let mut sent = statuses;
    logged.sort_unstable();
    sent.sort_unstable();
    assert_eq!(logged, sent);
}

#[test]
fn a_burst_and_a_rate_bound_what_gets_through() {
    // 1 a second with 3 at once beyond it: of 12 requests sent together, at most 4 get
    // through, and 1 more per second the test took.
    let nginx = Nginx::start_plans(&[HostPlan::new("metered").rate(1).burst(3)]);
    let began = Instant::now();
    let statuses = together(nginx.addr("metered"), 12);
    let took = began.elapsed().as_secs_f64();
    let passed = statuses.iter().filter(|status| **status == 200).count();
    println!("statuses {statuses:?} in {took:.3} s");
    assert!(
        passed as f64 <= 4.0 + took.ceil(),
        "{passed} through in {took:.3} s"
    );
    assert!(passed >= 1);
    assert!(
        statuses
            .iter()
            .all(|status| *status == 200 || *status == 429)
    );
}

#[test]
fn a_host_tells_its_policy_goes_down_with_retry_after_and_comes_back() {
    let plan = HostPlan::new("site")
        .rate(1_000)
        .policy(r#""default";q=10;w=1"#);
    let nginx = Nginx::start_plans(std::slice::from_ref(&plan));
    let addr = nginx.addr("site");
    assert_eq!(
        get(addr, "ratelimit-policy"),
        (200, Some(r#""default";q=10;w=1"#.to_owned()))
    );
    nginx.set_plan(plan.clone().down(5));
    assert_eq!(get(addr, "retry-after"), (503, Some("5".to_owned())));
    assert_eq!(
        get(addr, "ratelimit-policy").1.as_deref(),
        Some(r#""default";q=10;w=1"#),
        "the policy rides on the 503 too"
    );
    nginx.set_plan(plan.up());
    assert_eq!(get(addr, "retry-after"), (200, None));
    let logged: Vec<u16> = nginx
        .statuses("site")
        .iter()
        .map(|line| line.status)
        .collect();
    assert_eq!(logged, [200, 503, 503, 200]);
}

#[test]
fn a_meters_refusal_can_say_when_to_come_back() {
    let nginx = Nginx::start_plans(&[HostPlan::new("says-when").rate(1).refused_retry_after(1)]);
    let addr = nginx.addr("says-when");
    let began = Instant::now();
    let answers: Vec<(u16, Option<String>)> = (0..5).map(|_| get(addr, "retry-after")).collect();
    let took = began.elapsed();
    println!("{answers:?} in {took:?}");
    for (status, retry_after) in &answers {
        match status {
            200 => assert_eq!(*retry_after, None, "a 200 says nothing of coming back"),
            429 => assert_eq!(retry_after.as_deref(), Some("1")),
            other => panic!("status {other}"),
        }
    }
    if took < Duration::from_secs(1) {
        assert!(
            answers.iter().any(|(status, _)| *status == 429),
            "5 requests within a second of a meter of 1 a second: {answers:?}"
        );
    }
}
