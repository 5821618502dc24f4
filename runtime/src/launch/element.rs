//! Host element types that can live in device buffers.

use half::{bf16, f16};

/// The scalar kind of a buffer element or kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    U8,
    U16,
    U32,
    U64,
    S32,
    S64,
    F16,
    BF16,
    F32,
    F64,
}

impl ScalarKind {
    pub const fn size_bytes(self) -> usize {
        match self {
            ScalarKind::U8 => 1,
            ScalarKind::U16 | ScalarKind::F16 | ScalarKind::BF16 => 2,
            ScalarKind::U32 | ScalarKind::S32 | ScalarKind::F32 => 4,
            ScalarKind::U64 | ScalarKind::S64 | ScalarKind::F64 => 8,
        }
    }
}

/// A plain-old-data element: fixed size, little-endian byte image.
pub trait Element: Copy + Send + Sync + std::fmt::Debug + 'static {
    const KIND: ScalarKind;
    fn write_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $kind:ident, $n:expr) => {
        impl Element for $t {
            const KIND: ScalarKind = ScalarKind::$kind;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(&bytes[..$n]);
                <$t>::from_le_bytes(a)
            }
        }
    };
}

element!(u8, U8, 1);
element!(u16, U16, 2);
element!(u32, U32, 4);
element!(u64, U64, 8);
element!(i32, S32, 4);
element!(i64, S64, 8);
element!(f16, F16, 2);
element!(bf16, BF16, 2);
element!(f32, F32, 4);
element!(f64, F64, 8);

/// The little-endian byte image of a slice of elements.
pub fn to_le_bytes<T: Element>(data: &[T]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(std::mem::size_of_val(data));
    data.iter().for_each(|x| x.write_le(&mut bytes));
    bytes
}

/// The first `len` elements of a little-endian byte image (fewer if the image is shorter).
pub fn from_le_bytes<T: Element>(bytes: &[u8], len: usize) -> Vec<T> {
    bytes
        .chunks_exact(T::KIND.size_bytes())
        .take(len)
        .map(T::read_le)
        .collect()
}
