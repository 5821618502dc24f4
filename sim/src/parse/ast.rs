//! The syntax tree the parser produces: names are still strings, types are resolved to [`Ty`].
//! `decode` turns it into dense instructions.

use crate::types::Ty;

/// A state space of a variable or an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    Shared,
    Local,
    Const,
    Param,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VarDecl {
    pub space: Space,
    pub is_extern: bool,
    pub align: Option<u32>,
    pub ty: Ty,
    /// Vector width of the element (`.v2`, `.v4`), 1 for scalars.
    pub vec: u32,
    pub name: String,
    /// Number of elements: `None` for a scalar, `Some(None)` for an unsized array (`[]`).
    pub array: Option<Option<u64>>,
    /// Initializer values as raw literals (module-scope `.const`/`.global`).
    pub init: Vec<Operand>,
    pub line: usize,
}

impl VarDecl {
    /// Size in bytes (0 for unsized arrays).
    pub fn size(&self) -> u64 {
        let elem = u64::from(self.ty.bytes()) * u64::from(self.vec);
        match self.array {
            None => elem,
            Some(Some(n)) => elem.saturating_mul(n),
            Some(None) => 0,
        }
    }

    pub fn alignment(&self) -> u64 {
        u64::from(self.align.unwrap_or(self.ty.bytes() * self.vec)).max(1)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParamDecl {
    pub name: String,
    pub ty: Ty,
    pub align: Option<u32>,
    /// Element count for `.b8 name[K]` style parameters.
    pub array: Option<u64>,
    pub line: usize,
}

impl ParamDecl {
    pub fn size(&self) -> u64 {
        u64::from(self.ty.bytes()) * self.array.unwrap_or(1)
    }
}

/// Performance directives between the parameter list and the body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Perf {
    pub maxntid: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
    pub minnctapersm: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    pub is_entry: bool,
    /// `.func (.param .b32 ret) name(..)`: the return parameters.
    pub rets: Vec<ParamDecl>,
    pub params: Vec<ParamDecl>,
    /// Declared without a body (`.extern .func f(..);`, a prototype).
    pub is_decl: bool,
    pub perf: Perf,
    pub body: Vec<Stmt>,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// `.reg .ty names;` each name with an optional `<N>` range count.
    Reg {
        ty: Ty,
        names: Vec<(String, Option<u32>)>,
        line: usize,
    },
    Var(VarDecl),
    Label {
        name: String,
        line: usize,
    },
    Instr(Instr),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    pub line: usize,
    /// The nearest preceding `.loc` of the function body (source line information).
    pub loc: Option<SrcPos>,
    /// Guard predicate register and whether it is negated (`@!%p`).
    pub pred: Option<(String, bool)>,
    pub opcode: String,
    pub mods: Vec<String>,
    pub operands: Vec<Operand>,
}

impl Instr {
    /// `opcode.mod1.mod2` as written.
    pub fn full_opcode(&self) -> String {
        let mut s = self.opcode.clone();
        for m in &self.mods {
            s.push('.');
            s.push_str(m);
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A register, special register (`%tid.x`), symbol or label name.
    Name(String),
    /// `_`
    Sink,
    Int(u64),
    Float(f64),
    F32Bits(u32),
    F64Bits(u64),
    /// `[base+offset]`; `base` is `None` for an absolute address.
    Addr {
        base: Option<String>,
        offset: i64,
    },
    /// `{a, b, ...}` (or a parenthesised list).
    Vector(Vec<Operand>),
    /// `d|p`
    Pair(Box<Operand>, Box<Operand>),
    /// `!p`
    Not(Box<Operand>),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Module {
    /// `.file N "name"` directives: file number and name.
    pub files: Vec<(u32, String)>,
    pub version: Option<String>,
    pub target: Vec<String>,
    pub address_size: u32,
    pub vars: Vec<VarDecl>,
    pub functions: Vec<Function>,
}

/// A `.loc FILE LINE COLUMN` position (FILE is a `.file` number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrcPos {
    pub file: u32,
    pub line: u32,
    pub column: u32,
}
