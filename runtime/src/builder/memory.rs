//! Parameters, global and shared memory, atomics.

use std::marker::PhantomData;

use super::types::{Reg, Scalar, Val, U32, U64};
use super::KernelBuilder;
use crate::ir::{
    AddrBase, Address, AtomOp, Imm, Op, Operand, Param, ParamId, SharedArray, SharedId, Space,
    Type, VecWidth,
};

/// A declared kernel parameter holding a `T` (or, for pointers, the address of `T`s).
#[derive(Debug, Clone, Copy)]
pub struct ParamHandle<T> {
    id: ParamId,
    _t: PhantomData<T>,
}

/// A global-memory pointer to `T` elements (a generic address converted with `cvta.to.global`).
#[derive(Debug, Clone, Copy)]
pub struct GlobalPtr<T: Scalar> {
    pub addr: Reg<U64>,
    _t: PhantomData<T>,
}

/// A shared-memory array of `T`.
#[derive(Debug, Clone, Copy)]
pub struct SharedArr<T> {
    id: SharedId,
    /// Elements, or 0 for the dynamic array.
    pub len: u32,
    _t: PhantomData<T>,
}

impl<T: Scalar> SharedArr<T> {
    pub fn id(&self) -> SharedId {
        self.id
    }
}

/// The name every kernel's dynamic shared array has (one module-scope `.extern .shared`).
pub const DYNAMIC_SHARED_NAME: &str = "ptxforge_dynamic_smem";

impl KernelBuilder {
    fn add_param(&mut self, name: &str, ty: Type, pointee: Option<Type>) -> ParamId {
        let id = ParamId(self.kernel.params.len() as u32);
        self.kernel.params.push(Param {
            name: name.to_string(),
            ty,
            pointee,
        });
        id
    }

    /// A scalar parameter.
    pub fn param<T: Scalar>(&mut self, name: &str) -> ParamHandle<T> {
        ParamHandle {
            id: self.add_param(name, T::MOVE_TYPE, None),
            _t: PhantomData,
        }
    }

    /// A pointer parameter (`.param .u64`) to `T` elements in global memory.
    pub fn param_ptr<T: Scalar>(&mut self, name: &str) -> ParamHandle<GlobalPtr<T>> {
        ParamHandle {
            id: self.add_param(name, Type::U64, Some(T::TYPE)),
            _t: PhantomData,
        }
    }

    /// Loads a scalar parameter.
    pub fn load_param<T: Scalar>(&mut self, p: ParamHandle<T>) -> Reg<T> {
        let d = self.reg::<T>();
        let addr = Address {
            base: AddrBase::Param(p.id),
            offset: 0,
        };
        self.push(
            Op::Ld {
                space: Space::Param,
                ty: T::MOVE_TYPE,
                vec: VecWidth::V1,
                nc: false,
            },
            vec![Operand::Reg(d.id), Operand::Addr(addr)],
        );
        d
    }

    /// Loads a pointer parameter and converts it to a global address.
    pub fn global_ptr<T: Scalar>(&mut self, p: ParamHandle<GlobalPtr<T>>) -> GlobalPtr<T> {
        let generic = self.reg::<U64>();
        let addr = Address {
            base: AddrBase::Param(p.id),
            offset: 0,
        };
        self.push(
            Op::Ld {
                space: Space::Param,
                ty: Type::U64,
                vec: VecWidth::V1,
                nc: false,
            },
            vec![Operand::Reg(generic.id), Operand::Addr(addr)],
        );
        let global = self.reg::<U64>();
        self.push(
            Op::CvtaToGlobal,
            vec![Operand::Reg(global.id), Operand::Reg(generic.id)],
        );
        GlobalPtr {
            addr: global,
            _t: PhantomData,
        }
    }

    /// The address of element `index` (u32) of `ptr`: `ptr + index · sizeof(T)`.
    pub fn elem_addr<T: Scalar>(
        &mut self,
        ptr: GlobalPtr<T>,
        index: impl Into<Val<U32>>,
    ) -> Reg<U64> {
        let offset = self.mul_wide(index, T::TYPE.bytes());
        self.add(ptr.addr, offset)
    }

    /// The address of element `index` (u64) of `ptr`.
    pub fn elem_addr64<T: Scalar>(&mut self, ptr: GlobalPtr<T>, index: Reg<U64>) -> Reg<U64> {
        let offset = self.mul_lo(index, u64::from(T::TYPE.bytes()));
        self.add(ptr.addr, offset)
    }

    /// A pointer `count` elements further along.
    pub fn offset_ptr<T: Scalar>(
        &mut self,
        ptr: GlobalPtr<T>,
        count: impl Into<Val<U32>>,
    ) -> GlobalPtr<T> {
        GlobalPtr {
            addr: self.elem_addr(ptr, count),
            _t: PhantomData,
        }
    }

    /// Reinterprets a pointer as pointing at another element type.
    pub fn cast_ptr<T: Scalar, U: Scalar>(&mut self, ptr: GlobalPtr<T>) -> GlobalPtr<U> {
        GlobalPtr {
            addr: ptr.addr,
            _t: PhantomData,
        }
    }

    fn global_addr(addr: Reg<U64>, offset: i32) -> Operand {
        Operand::Addr(Address {
            base: AddrBase::Reg(addr.id),
            offset,
        })
    }

    /// `ld.global.T d, [addr+offset]`.
    pub fn ld_global<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32) -> Reg<T> {
        self.ld_global_with(addr, offset, false)
    }

    /// `ld.global.nc.T`: read-only data through the non-coherent cache.
    pub fn ld_global_nc<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32) -> Reg<T> {
        self.ld_global_with(addr, offset, true)
    }

    fn ld_global_with<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, nc: bool) -> Reg<T> {
        let d = self.reg::<T>();
        let op = Op::Ld {
            space: Space::Global,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V1,
            nc,
        };
        self.push(
            op,
            vec![Operand::Reg(d.id), Self::global_addr(addr, offset)],
        );
        d
    }

    /// `ld.global{.nc}.v4.T`: four consecutive elements (address aligned to 4·sizeof(T)).
    pub fn ld_global_v4<T: Scalar>(
        &mut self,
        addr: Reg<U64>,
        offset: i32,
        nc: bool,
    ) -> [Reg<T>; 4] {
        let d = [
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
        ];
        let op = Op::Ld {
            space: Space::Global,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V4,
            nc,
        };
        self.push(
            op,
            vec![
                Operand::Vec(d.iter().map(|r| r.id).collect()),
                Self::global_addr(addr, offset),
            ],
        );
        d
    }

    /// `ld.global{.nc}.v2.T`: two consecutive elements.
    pub fn ld_global_v2<T: Scalar>(
        &mut self,
        addr: Reg<U64>,
        offset: i32,
        nc: bool,
    ) -> [Reg<T>; 2] {
        let d = [self.reg::<T>(), self.reg::<T>()];
        let op = Op::Ld {
            space: Space::Global,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V2,
            nc,
        };
        self.push(
            op,
            vec![
                Operand::Vec(d.iter().map(|r| r.id).collect()),
                Self::global_addr(addr, offset),
            ],
        );
        d
    }

    /// `st.global.T [addr+offset], v`.
    pub fn st_global<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, v: impl Into<Val<T>>) {
        let op = Op::St {
            space: Space::Global,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V1,
        };
        self.push(
            op,
            vec![Self::global_addr(addr, offset), v.into().operand()],
        );
    }

    /// `st.global.v4.T`.
    pub fn st_global_v4<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, v: [Reg<T>; 4]) {
        self.st_global_vec(addr, offset, VecWidth::V4, &v);
    }

    /// `st.global.v2.T`.
    pub fn st_global_v2<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, v: [Reg<T>; 2]) {
        self.st_global_vec(addr, offset, VecWidth::V2, &v);
    }

    fn st_global_vec<T: Scalar>(
        &mut self,
        addr: Reg<U64>,
        offset: i32,
        vec: VecWidth,
        v: &[Reg<T>],
    ) {
        let op = Op::St {
            space: Space::Global,
            ty: T::MOVE_TYPE,
            vec,
        };
        self.push(
            op,
            vec![
                Self::global_addr(addr, offset),
                Operand::Vec(v.iter().map(|r| r.id).collect()),
            ],
        );
    }

    // ---- shared memory --------------------------------------------------------------------

    /// A static shared array of `len` elements, 16-byte aligned.
    pub fn shared_array<T: Scalar>(&mut self, name: &str, len: u32) -> SharedArr<T> {
        let id = SharedId(self.kernel.shared.len() as u32);
        let bytes = len.saturating_mul(T::TYPE.bytes());
        self.kernel.shared.push(SharedArray {
            name: name.to_string(),
            align: 16,
            bytes: Some(bytes),
        });
        SharedArr {
            id,
            len,
            _t: PhantomData,
        }
    }

    /// The dynamic shared array (`.extern .shared`), sized at launch; `max_bytes` is the most
    /// the kernel will be launched with (checked against the arch by the validator).
    pub fn dynamic_shared<T: Scalar>(&mut self, max_bytes: u32) -> SharedArr<T> {
        let id = SharedId(self.kernel.shared.len() as u32);
        self.kernel.shared.push(SharedArray {
            name: DYNAMIC_SHARED_NAME.to_string(),
            align: 16,
            bytes: None,
        });
        self.kernel.max_dynamic_shared_bytes = max_bytes;
        SharedArr {
            id,
            len: 0,
            _t: PhantomData,
        }
    }

    /// The 32-bit shared-space address of a shared array.
    pub fn shared_base<T: Scalar>(&mut self, arr: SharedArr<T>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Mov(Type::U32),
            vec![Operand::Reg(d.id), Operand::SharedAddr(arr.id)],
        );
        d
    }

    /// The shared address of element `index` of `arr`.
    pub fn shared_elem<T: Scalar>(
        &mut self,
        arr: SharedArr<T>,
        index: impl Into<Val<U32>>,
    ) -> Reg<U32> {
        let base = self.shared_base(arr);
        self.mad_lo(index, T::TYPE.bytes(), base)
    }

    fn shared_operand(addr: Reg<U32>, offset: i32) -> Operand {
        Operand::Addr(Address {
            base: AddrBase::Reg(addr.id),
            offset,
        })
    }

    /// `ld.shared.T d, [addr+offset]`.
    pub fn ld_shared<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32) -> Reg<T> {
        let d = self.reg::<T>();
        let op = Op::Ld {
            space: Space::Shared,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V1,
            nc: false,
        };
        self.push(
            op,
            vec![Operand::Reg(d.id), Self::shared_operand(addr, offset)],
        );
        d
    }

    /// `ld.shared.v4.T`.
    pub fn ld_shared_v4<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32) -> [Reg<T>; 4] {
        let d = [
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
            self.reg::<T>(),
        ];
        let op = Op::Ld {
            space: Space::Shared,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V4,
            nc: false,
        };
        self.push(
            op,
            vec![
                Operand::Vec(d.iter().map(|r| r.id).collect()),
                Self::shared_operand(addr, offset),
            ],
        );
        d
    }

    /// `st.shared.T [addr+offset], v`.
    pub fn st_shared<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, v: impl Into<Val<T>>) {
        let op = Op::St {
            space: Space::Shared,
            ty: T::MOVE_TYPE,
            vec: VecWidth::V1,
        };
        self.push(
            op,
            vec![Self::shared_operand(addr, offset), v.into().operand()],
        );
    }

    /// `st.shared.v2.T`.
    pub fn st_shared_v2<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, v: [Reg<T>; 2]) {
        self.st_shared_vec(addr, offset, VecWidth::V2, &v);
    }

    /// `st.shared.v4.T`.
    pub fn st_shared_v4<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, v: [Reg<T>; 4]) {
        self.st_shared_vec(addr, offset, VecWidth::V4, &v);
    }

    fn st_shared_vec<T: Scalar>(
        &mut self,
        addr: Reg<U32>,
        offset: i32,
        vec: VecWidth,
        v: &[Reg<T>],
    ) {
        let op = Op::St {
            space: Space::Shared,
            ty: T::MOVE_TYPE,
            vec,
        };
        self.push(
            op,
            vec![
                Self::shared_operand(addr, offset),
                Operand::Vec(v.iter().map(|r| r.id).collect()),
            ],
        );
    }

    // ---- atomics --------------------------------------------------------------------------

    fn atom_type<T: Scalar>(op: AtomOp) -> Type {
        match op {
            AtomOp::Exch | AtomOp::Cas | AtomOp::And | AtomOp::Or => match T::TYPE.bits() {
                64 => Type::B64,
                _ => Type::B32,
            },
            _ => T::TYPE,
        }
    }

    /// `atom.global.op.T d, [addr], v`: returns the old value.
    pub fn atom_global<T: Scalar>(
        &mut self,
        op: AtomOp,
        addr: Reg<U64>,
        v: impl Into<Val<T>>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = Self::atom_type::<T>(op);
        self.push(
            Op::Atom {
                space: Space::Global,
                op,
                ty,
            },
            vec![
                Operand::Reg(d.id),
                Self::global_addr(addr, 0),
                v.into().operand(),
            ],
        );
        d
    }

    /// `atom.shared.op.T d, [addr], v`: returns the old value.
    pub fn atom_shared<T: Scalar>(
        &mut self,
        op: AtomOp,
        addr: Reg<U32>,
        v: impl Into<Val<T>>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = Self::atom_type::<T>(op);
        self.push(
            Op::Atom {
                space: Space::Shared,
                op,
                ty,
            },
            vec![
                Operand::Reg(d.id),
                Self::shared_operand(addr, 0),
                v.into().operand(),
            ],
        );
        d
    }

    /// `atom.global.cas.b32 d, [addr], compare, value`.
    pub fn atom_cas_global<T: Scalar>(
        &mut self,
        addr: Reg<U64>,
        compare: impl Into<Val<T>>,
        value: impl Into<Val<T>>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = Self::atom_type::<T>(AtomOp::Cas);
        let args = vec![
            Operand::Reg(d.id),
            Self::global_addr(addr, 0),
            compare.into().operand(),
            value.into().operand(),
        ];
        self.push(
            Op::Atom {
                space: Space::Global,
                op: AtomOp::Cas,
                ty,
            },
            args,
        );
        d
    }

    /// `red.global.op.T [addr], v`: an atomic update whose old value is not needed.
    pub fn red_global<T: Scalar>(&mut self, op: AtomOp, addr: Reg<U64>, v: impl Into<Val<T>>) {
        let ty = Self::atom_type::<T>(op);
        self.push(
            Op::Red {
                space: Space::Global,
                op,
                ty,
            },
            vec![Self::global_addr(addr, 0), v.into().operand()],
        );
    }

    /// `red.shared.op.T [addr], v`.
    pub fn red_shared<T: Scalar>(&mut self, op: AtomOp, addr: Reg<U32>, v: impl Into<Val<T>>) {
        let ty = Self::atom_type::<T>(op);
        self.push(
            Op::Red {
                space: Space::Shared,
                op,
                ty,
            },
            vec![Self::shared_operand(addr, 0), v.into().operand()],
        );
    }

    /// An integer immediate operand (for callers building raw instructions).
    pub fn imm(v: i64) -> Operand {
        Operand::Imm(Imm::Int(v))
    }
}
