//! Just enough of Structured Field Values (RFC 9651) to read the rate-limit fields: a List of
//! Items with Parameters. Every kind of bare item is parsed (so a valid field never fails on
//! an item it does not care about), but only integers, strings and tokens keep their value.
//! A field that does not parse is ignored whole, as RFC 9651 asks; a field sent on several
//! lines is one list, as if the lines were joined with commas.

use ::http::HeaderMap;
use ::http::header::AsHeaderName;

/// A bare item, as far as the rate-limit fields need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bare<'a> {
    Integer(i64),
    /// A string's content, escapes left as they are (the values compared have none), or a
    /// token.
    Text(&'a [u8]),
    /// A decimal, byte sequence, boolean, date, display string or inner list.
    Other,
}

impl Bare<'_> {
    /// The value as a non-negative integer.
    pub(crate) fn count(self) -> Option<u64> {
        match self {
            Bare::Integer(value) => u64::try_from(value).ok(),
            _ => None,
        }
    }
}

/// One member of a list: its value and its parameters, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    pub(crate) value: Bare<'a>,
    params: Vec<(&'a [u8], Bare<'a>)>,
}

impl<'a> Member<'a> {
    /// The parameter `key` (the last one when it repeats, as RFC 9651 keeps).
    pub(crate) fn param(&self, key: &str) -> Option<Bare<'a>> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| *k == key.as_bytes())
            .map(|(_, value)| *value)
    }
}

/// Every member of the list field `name` over all its lines; `None` if the field is absent
/// or any line does not parse.
pub(crate) fn list(headers: &HeaderMap, name: impl AsHeaderName) -> Option<Vec<Member<'_>>> {
    let mut members = Vec::new();
    let mut present = false;
    for value in headers.get_all(name) {
        present = true;
        Parser::new(value.as_bytes()).list(&mut members)?;
    }
    present.then_some(members)
}

/// A parser over one field line.
pub(crate) struct Parser<'a> {
    input: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Self { input, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    /// Parses a whole line as a List, pushing its members onto `out`.
    pub(crate) fn list(mut self, out: &mut Vec<Member<'a>>) -> Option<()> {
        self.skip_spaces();
        while self.peek().is_some() {
            let member = self.member()?;
            out.push(member);
            self.skip_ows();
            if self.peek().is_none() {
                break;
            }
            if !self.eat(b',') {
                return None;
            }
            self.skip_ows();
            // A trailing comma is an error.
            self.peek()?;
        }
        Some(())
    }

    fn member(&mut self) -> Option<Member<'a>> {
        let value = if self.eat(b'(') {
            self.inner_list()?;
            Bare::Other
        } else {
            self.bare_item()?
        };
        let params = self.params()?;
        Some(Member { value, params })
    }

    fn inner_list(&mut self) -> Option<()> {
        loop {
            self.skip_spaces();
            if self.eat(b')') {
                return Some(());
            }
            self.bare_item()?;
            self.params()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    fn params(&mut self) -> Option<Vec<(&'a [u8], Bare<'a>)>> {
        let mut params = Vec::new();
        while self.eat(b';') {
            self.skip_spaces();
            let key = self.key()?;
            let value = if self.eat(b'=') {
                self.bare_item()?
            } else {
                Bare::Other // true
            };
            params.push((key, value));
        }
        Some(params)
    }

    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return None;
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.at += 1;
        }
        Some(&self.input[start..self.at])
    }

    fn bare_item(&mut self) -> Option<Bare<'a>> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b'a'..=b'z' | b'A'..=b'Z' | b'*' => Some(self.token()),
            b':' => self.byte_sequence(),
            b'?' => {
                self.at += 1;
                (self.eat(b'0') || self.eat(b'1')).then_some(Bare::Other)
            }
            b'@' => {
                self.at += 1;
                matches!(self.number()?, Bare::Integer(_)).then_some(Bare::Other)
            }
            b'%' => self.display_string(),
            _ => None,
        }
    }

    /// An Integer (at most 15 digits) or a Decimal (at most 12 digits, a dot, 1 to 3).
    fn number(&mut self) -> Option<Bare<'a>> {
        let negative = self.eat(b'-');
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let whole = &self.input[start..self.at];
        if whole.is_empty() {
            return None;
        }
        if self.eat(b'.') {
            let fraction = self.at;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.at += 1;
            }
            let digits = self.at - fraction;
            return (whole.len() <= 12 && (1..=3).contains(&digits)).then_some(Bare::Other);
        }
        if whole.len() > 15 {
            return None;
        }
        let magnitude = whole
            .iter()
            .fold(0i64, |n, &digit| n * 10 + i64::from(digit - b'0'));
        Some(Bare::Integer(if negative { -magnitude } else { magnitude }))
    }

    fn string(&mut self) -> Option<Bare<'a>> {
        self.at += 1; // the opening quote
        let start = self.at;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(Bare::Text(&self.input[start..self.at - 1]));
                }
                b'\\' => {
                    self.at += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.at += 1;
                }
                0x20..=0x7e => self.at += 1,
                _ => return None,
            }
        }
    }

    fn token(&mut self) -> Bare<'a> {
        let start = self.at;
        self.at += 1;
        while self
            .peek()
            .is_some_and(|b| is_tchar(b) || b == b':' || b == b'/')
        {
            self.at += 1;
        }
        Bare::Text(&self.input[start..self.at])
    }

    fn byte_sequence(&mut self) -> Option<Bare<'a>> {
        self.at += 1;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        {
            self.at += 1;
        }
        self.eat(b':').then_some(Bare::Other)
    }

    /// `%"..."`: printable ASCII, with `%xx` (lowercase hex) for anything else.
    fn display_string(&mut self) -> Option<Bare<'a>> {
        self.at += 1;
        if !self.eat(b'"') {
            return None;
        }
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(Bare::Other);
                }
                b'%' => {
                    self.at += 1;
                    for _ in 0..2 {
                        if !matches!(self.peek()?, b'0'..=b'9' | b'a'..=b'f') {
                            return None;
                        }
                        self.at += 1;
                    }
                }
                0x20..=0x7e => self.at += 1,
                _ => return None,
            }
        }
    }
}

/// A `tchar` of RFC 9110 (the characters of a token).
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Option<Vec<Member<'_>>> {
        let mut out = Vec::new();
        Parser::new(line.as_bytes()).list(&mut out).map(|()| out)
    }

    #[test]
    fn reads_items_and_parameters() {
        let members = parse(r#""burst";q=100;w=60,"daily";q=1000;w=86400"#).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].value, Bare::Text(b"burst"));
        assert_eq!(members[0].param("q"), Some(Bare::Integer(100)));
        assert_eq!(members[1].param("w"), Some(Bare::Integer(86_400)));
        assert_eq!(members[1].param("pk"), None);

        let members = parse("quota;q=10, 10;w=1;comment=\"a \\\"b\\\"\"").unwrap();
        assert_eq!(members[0].value, Bare::Text(b"quota"));
        assert_eq!(members[1].value, Bare::Integer(10));

        // Every kind of bare item parses; repeated keys keep the last.
        let members = parse(
            r#"a;x=?1;y=:cHsdsRa894==:;z=1.5;d=@1659578233;s=%"f%c3%bc";q=1;q=2, (1 "b" c);n, -3"#,
        )
        .unwrap();
        assert_eq!(members.len(), 3);
        assert_eq!(members[0].param("q"), Some(Bare::Integer(2)));
        assert_eq!(members[1].value, Bare::Other);
        assert_eq!(members[2].value, Bare::Integer(-3));
        assert_eq!(members[2].value.count(), None);
        assert_eq!(parse("  "), Some(vec![]));
    }

    #[test]
    fn rejects_what_rfc_9651_rejects() {
        for bad in [
            "a,",
            ",a",
            "a,,b",
            "a b",
            "\"open",
            "\"bad \\x escape\"",
            "1234567890123456",
            "1.2345",
            "1234567890123.5",
            "-",
            "a;Q=1",
            "a;q=",
            ":abc",
            "?2",
            "(1 2",
            "(1,2)",
            "%\"%C3\"",
            "\"caf\u{e9}\"",
            "a;q=1 ;w=2",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
