//! Errors of the interpreter and of its host API: malformed PTX, unsupported instructions, host
//! misuse. A kernel's own faults are not errors; they are [`crate::Finding`]s.

use thiserror::Error;

/// An interpreter limitation or a misuse of the host API. Never a fault of the kernel itself.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SimError {
    /// The PTX text is malformed.
    #[error("PTX parse error at line {line}: {message}")]
    Parse { line: usize, message: String },
    /// The PTX is valid but uses an instruction (or modifier combination) the interpreter does not
    /// implement.
    #[error("unsupported instruction at line {line}: `{opcode}`{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    Unsupported {
        line: usize,
        opcode: String,
        detail: String,
    },
    /// The module has no `.entry` of that name.
    #[error("no entry named `{name}` in the module (entries: {available})")]
    UnknownEntry { name: String, available: String },
    /// The module has no module-scope `.global`/`.const` variable of that name.
    #[error("no module-scope .global or .const variable named `{name}` (variables: {available})")]
    UnknownSymbol { name: String, available: String },
    /// The number of launch arguments differs from the entry's parameter count.
    #[error("entry `{entry}` takes {expected} parameters, {given} arguments were given")]
    ArgCount {
        entry: String,
        expected: usize,
        given: usize,
    },
    /// A launch argument does not fit the declared parameter.
    #[error("argument {index} (`{param}`): {message}")]
    ArgType {
        index: usize,
        param: String,
        message: String,
    },
    /// A buffer id that was never allocated or was already freed.
    #[error("buffer {0} does not exist or was freed")]
    BadBuffer(u32),
    /// Host data does not fit a buffer (size mismatch on write or typed download).
    #[error("buffer {id}: {message}")]
    BufferSize { id: u32, message: String },
    /// Grid, block or shared-memory configuration the device cannot launch.
    #[error("invalid launch configuration: {0}")]
    BadLaunch(String),
}
