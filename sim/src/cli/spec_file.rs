//! Launch spec files: `ptxforge-sim run --spec launch.json`, an alternative to flags. The file
//! is turned into the flags it stands for, so both take one parser and one set of rules.
//!
//! ```json
//! {
//!   "kernel": "histogram.ptx",
//!   "entry": "histogram", "grid": [4], "block": [128], "smem": 0,
//!   "buffers": {"data": "u32:rand:512:7", "bins": "u32:zeros:64"},
//!   "init": ["bins=0..8:fill:1"],
//!   "globals": {"scale": "f32:2.5"},
//!   "args": ["data", "bins", "u32:512"],
//!   "dumps": {"bins": "bins.bin"},
//!   "no_check": ["initcheck"], "shuffle_blocks": 3, "fuel": 1000000, "threads": 2,
//!   "report": "text"
//! }
//! ```
//!
//! Values are written as the flags' values (`"u32:zeros:8"` for `--buf data=u32:zeros:8`);
//! dimensions may be a number, an array of numbers or a `"X,Y"` string. Relative paths (the
//! kernel, `file:` buffer sources, dumps) are relative to the spec file's directory.

use std::path::Path;

use crate::json::read::{self, Value};

const KEYS: &str = "kernel, entry, grid, block, smem, buffers, init, globals, args, dumps, \
                    no_check, shuffle_blocks, fuel, threads, report";

/// The flags a spec file at `path` stands for.
pub fn spec_flags(path: &str) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    let dir = Path::new(path).parent().unwrap_or(Path::new(""));
    flags_from_json(&text, dir).map_err(|e| format!("{path}: {e}"))
}

/// The flags spec text `text` stands for, relative paths resolved against `dir`.
pub fn flags_from_json(text: &str, dir: &Path) -> Result<Vec<String>, String> {
    let Value::Object(members) = read::parse(text)? else {
        return Err("a launch spec is a JSON object".into());
    };
    let mut out = Vec::new();
    let mut flag = |name: &str, v: String| {
        out.push(format!("--{name}"));
        out.push(v);
    };
    for (key, v) in &members {
        match key.as_str() {
            "kernel" => flag("kernel", path_in(dir, &string(key, v)?)),
            "entry" => flag("entry", string(key, v)?),
            "grid" | "block" => flag(key, dims(key, v)?),
            "smem" | "shuffle_blocks" | "fuel" | "threads" => {
                flag(&key.replace('_', "-"), number(key, v)?)
            }
            "report" => flag("report", string(key, v)?),
            "buffers" => {
                for (name, src) in object(key, v)? {
                    let src = string(&format!("buffers.{name}"), src)?;
                    flag("buf", format!("{name}={}", file_source_in(dir, &src)));
                }
            }
            "globals" => {
                for (name, vals) in object(key, v)? {
                    flag(
                        "global",
                        format!("{name}={}", string(&format!("globals.{name}"), vals)?),
                    );
                }
            }
            "dumps" => {
                for (name, p) in object(key, v)? {
                    let p = string(&format!("dumps.{name}"), p)?;
                    flag("dump", format!("{name}={}", path_in(dir, &p)));
                }
            }
            "init" | "args" | "no_check" => {
                let flag_name = match key.as_str() {
                    "init" => "init",
                    "args" => "arg",
                    _ => "no-check",
                };
                for item in array(key, v)? {
                    flag(flag_name, string(key, item)?);
                }
            }
            _ => return Err(format!("unknown key `{key}` (expected one of {KEYS})")),
        }
    }
    Ok(out)
}

fn string(key: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(format!("`{key}` must be a string")),
    }
}

fn number(key: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::Number(n) => Ok(n.clone()),
        _ => Err(format!("`{key}` must be a number")),
    }
}

fn object<'a>(key: &str, v: &'a Value) -> Result<&'a [(String, Value)], String> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(format!("`{key}` must be an object of name: value")),
    }
}

fn array<'a>(key: &str, v: &'a Value) -> Result<&'a [Value], String> {
    match v {
        Value::Array(a) => Ok(a),
        _ => Err(format!("`{key}` must be an array")),
    }
}

/// `4`, `[4, 2]` or `"4,2"` as the flag value `4,2`.
fn dims(key: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::Number(n) => Ok(n.clone()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(items) => Ok(items
            .iter()
            .map(|d| number(key, d))
            .collect::<Result<Vec<_>, _>>()?
            .join(",")),
        _ => Err(format!(
            "`{key}` must be a number, an array of numbers or \"X,Y,Z\""
        )),
    }
}

fn path_in(dir: &Path, p: &str) -> String {
    if Path::new(p).is_absolute() {
        p.to_string()
    } else {
        dir.join(p).to_string_lossy().into_owned()
    }
}

/// `TYPE:file:PATH` with PATH resolved against `dir`; other sources unchanged.
fn file_source_in(dir: &Path, src: &str) -> String {
    match src.split_once(':') {
        Some((ty, rest)) => match rest.strip_prefix("file:") {
            Some(p) => format!("{ty}:file:{}", path_in(dir, p)),
            None => src.to_string(),
        },
        None => src.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_becomes_the_flags_it_stands_for() {
        let flags = flags_from_json(
            r#"{"kernel": "k.ptx", "entry": "k", "grid": [4, 2], "block": 64, "smem": 128,
                "buffers": {"x": "f32:file:x.bin", "y": "f32:uninit:8"},
                "init": ["y=0..4:rand:3"], "globals": {"s": "f32:2.5"},
                "args": ["x", "y", "u32:8"], "dumps": {"y": "/tmp/y.bin"},
                "no_check": ["racecheck"], "shuffle_blocks": 5, "report": "text"}"#,
            Path::new("specs"),
        )
        .unwrap();
        let want = [
            "--kernel",
            "specs/k.ptx",
            "--entry",
            "k",
            "--grid",
            "4,2",
            "--block",
            "64",
            "--smem",
            "128",
            "--buf",
            "x=f32:file:specs/x.bin",
            "--buf",
            "y=f32:uninit:8",
            "--init",
            "y=0..4:rand:3",
            "--global",
            "s=f32:2.5",
            "--arg",
            "x",
            "--arg",
            "y",
            "--arg",
            "u32:8",
            "--dump",
            "y=/tmp/y.bin",
            "--no-check",
            "racecheck",
            "--shuffle-blocks",
            "5",
            "--report",
            "text",
        ];
        assert_eq!(flags, want);
    }

    #[test]
    fn unknown_keys_and_wrong_shapes_are_errors() {
        let e = flags_from_json(r#"{"gird": [1]}"#, Path::new("")).unwrap_err();
        assert!(
            e.contains("unknown key `gird`") && e.contains("grid"),
            "{e}"
        );
        let e = flags_from_json(r#"{"args": "x"}"#, Path::new("")).unwrap_err();
        assert!(e.contains("`args` must be an array"), "{e}");
        let e = flags_from_json(r#"[1]"#, Path::new("")).unwrap_err();
        assert!(e.contains("JSON object"), "{e}");
        let e = flags_from_json(r#"{"entry": "k",}"#, Path::new("")).unwrap_err();
        assert!(e.contains("JSON line 1"), "{e}");
    }
}
