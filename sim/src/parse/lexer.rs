//! Lexer: PTX text to tokens with line numbers. Comments are dropped here; numbers are decoded
//! here (hex floats `0f…`/`0d…`, hex/octal/binary/decimal integers, decimal floats).

use crate::error::SimError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Identifier, register (`%r1`) or label name.
    Ident(String),
    /// `.name` (directive, type, or modifier), without the dot.
    Dot(String),
    /// Integer literal (two's complement bits; negation is applied by the parser).
    Int(u64),
    /// Decimal floating-point literal.
    Float(f64),
    /// `0fXXXXXXXX`: exact f32 bits.
    F32Bits(u32),
    /// `0dXXXXXXXXXXXXXXXX`: exact f64 bits.
    F64Bits(u64),
    Str(String),
    Punct(char),
}

#[derive(Debug, Clone)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c == b'%'
}

fn is_ident_cont(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

fn err(line: usize, message: impl Into<String>) -> SimError {
    SimError::Parse {
        line,
        message: message.into(),
    }
}

/// Splits `text` into tokens.
pub fn lex(text: &str) -> Result<Vec<Token>, SimError> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let start = line;
            i += 2;
            loop {
                if i + 1 >= b.len() {
                    return Err(err(start, "unterminated /* comment"));
                }
                if b[i] == b'*' && b[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            continue;
        }
        if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\n' {
                    return Err(err(line, "unterminated string literal"));
                }
                i += 1;
            }
            if i >= b.len() {
                return Err(err(line, "unterminated string literal"));
            }
            let s = String::from_utf8_lossy(&b[start..i]).into_owned();
            i += 1;
            out.push(Token {
                tok: Tok::Str(s),
                line,
            });
            continue;
        }
        if c == b'.' && b.get(i + 1).is_some_and(|&n| is_ident_cont(n)) {
            let start = i + 1;
            i += 1;
            while i < b.len() {
                if is_ident_cont(b[i]) {
                    i += 1;
                } else if b[i] == b':' && b.get(i + 1) == Some(&b':') {
                    i += 2;
                } else {
                    break;
                }
            }
            let s = String::from_utf8_lossy(&b[start..i]).into_owned();
            out.push(Token {
                tok: Tok::Dot(s),
                line,
            });
            continue;
        }
        if is_ident_start(c) {
            let start = i;
            i += 1;
            while i < b.len() && is_ident_cont(b[i]) {
                i += 1;
            }
            let s = String::from_utf8_lossy(&b[start..i]).into_owned();
            out.push(Token {
                tok: Tok::Ident(s),
                line,
            });
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                // A sign directly after an exponent marker belongs to the number.
                i += 1;
                if i < b.len()
                    && (b[i] == b'+' || b[i] == b'-')
                    && (b[i - 1] == b'e' || b[i - 1] == b'E')
                    && !b[start..i].starts_with(b"0x")
                    && !b[start..i].starts_with(b"0X")
                    && !b[start..i].starts_with(b"0f")
                    && !b[start..i].starts_with(b"0d")
                {
                    i += 1;
                }
            }
            let s = std::str::from_utf8(&b[start..i]).map_err(|_| err(line, "bad number"))?;
            out.push(Token {
                tok: number(s).ok_or_else(|| err(line, format!("malformed number `{s}`")))?,
                line,
            });
            continue;
        }
        if b",;:{}[]()<>+-@!|=".contains(&c) {
            out.push(Token {
                tok: Tok::Punct(c as char),
                line,
            });
            i += 1;
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or('?');
        return Err(err(line, format!("unexpected character `{ch}`")));
    }
    Ok(out)
}

fn number(s: &str) -> Option<Tok> {
    let lower = s.to_ascii_lowercase();
    let t = lower.strip_suffix('u').unwrap_or(&lower);
    if let Some(h) = t.strip_prefix("0f") {
        if h.len() == 8 {
            return u32::from_str_radix(h, 16).ok().map(Tok::F32Bits);
        }
        return None;
    }
    if let Some(h) = t.strip_prefix("0d") {
        if h.len() == 16 {
            return u64::from_str_radix(h, 16).ok().map(Tok::F64Bits);
        }
        return None;
    }
    if let Some(h) = t.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok().map(Tok::Int);
    }
    if let Some(h) = t.strip_prefix("0b") {
        return u64::from_str_radix(h, 2).ok().map(Tok::Int);
    }
    if t.contains('.') || t.contains('e') {
        return t.parse::<f64>().ok().map(Tok::Float);
    }
    if t.len() > 1 && t.starts_with('0') {
        return u64::from_str_radix(&t[1..], 8).ok().map(Tok::Int);
    }
    t.parse::<u64>().ok().map(Tok::Int)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(number("0f3F800000"), Some(Tok::F32Bits(0x3F80_0000)));
        assert_eq!(
            number("0d3FF0000000000000"),
            Some(Tok::F64Bits(0x3FF0_0000_0000_0000))
        );
        assert_eq!(number("0xff"), Some(Tok::Int(255)));
        assert_eq!(number("0xFFFFFFFFU"), Some(Tok::Int(0xFFFF_FFFF)));
        assert_eq!(number("010"), Some(Tok::Int(8)));
        assert_eq!(number("1.5"), Some(Tok::Float(1.5)));
        assert_eq!(number("1e-3"), Some(Tok::Float(1e-3)));
        assert_eq!(number("0f3F8"), None);
    }

    #[test]
    fn tokens_and_comments() {
        let t = lex("ld.global.f32 %f1, [%rd1+-4]; // c\n/* x\n y */ bra $L1;").unwrap();
        assert_eq!(t[0].tok, Tok::Ident("ld".into()));
        assert_eq!(t[1].tok, Tok::Dot("global".into()));
        let last = t.last().unwrap();
        assert_eq!(last.line, 3);
    }
}
