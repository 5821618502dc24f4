//! The target architecture model: which GPUs ptxforge emits for, the PTX ISA version each needs,
//! what each can do (named capability predicates) and its per-block resource limits.
//!
//! This is the only place that compares SM numbers; templates and the validator ask named
//! questions (`arch.has_bf16_math()`), never `sm >= 80`.

use std::fmt;
use std::str::FromStr;

/// A PTX ISA version, `major.minor` (printed in the `.version` directive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PtxVersion {
    pub major: u8,
    pub minor: u8,
}

impl PtxVersion {
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for PtxVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A GPU architecture ptxforge can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    /// Volta (V100).
    Sm70,
    /// Turing (T4, RTX 20xx).
    Sm75,
    /// Ampere datacenter (A100).
    Sm80,
    /// Ampere consumer (RTX 30xx, A10).
    Sm86,
    /// Ada (L4, L40, RTX 40xx).
    Sm89,
    /// Hopper (H100, H200), portable subset.
    Sm90,
    /// Hopper with architecture-specific features (wgmma, setmaxnreg).
    Sm90a,
}

/// Error for an unknown architecture name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown architecture `{name}`; expected one of: {}", Arch::NAMES.join(", "))]
pub struct UnknownArch {
    pub name: String,
}

impl Arch {
    /// Every supported architecture, oldest first.
    pub const ALL: [Arch; 7] = [
        Arch::Sm70,
        Arch::Sm75,
        Arch::Sm80,
        Arch::Sm86,
        Arch::Sm89,
        Arch::Sm90,
        Arch::Sm90a,
    ];

    /// The names accepted by [`Arch::from_str`], in the order of [`Arch::ALL`].
    pub const NAMES: [&'static str; 7] = [
        "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a",
    ];

    /// The `.target` name, e.g. `sm_80`.
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The SM number without the `a` suffix (70, 75, …, 90). Private: callers use predicates.
    const fn sm(self) -> u32 {
        match self {
            Arch::Sm70 => 70,
            Arch::Sm75 => 75,
            Arch::Sm80 => 80,
            Arch::Sm86 => 86,
            Arch::Sm89 => 89,
            Arch::Sm90 | Arch::Sm90a => 90,
        }
    }

    /// The minimum PTX ISA version that knows this target (PTX ISA "Release notes" table).
    pub const fn min_ptx_version(self) -> PtxVersion {
        match self {
            Arch::Sm70 => PtxVersion::new(6, 0),
            Arch::Sm75 => PtxVersion::new(6, 3),
            Arch::Sm80 => PtxVersion::new(7, 0),
            Arch::Sm86 => PtxVersion::new(7, 1),
            Arch::Sm89 | Arch::Sm90 => PtxVersion::new(7, 8),
            Arch::Sm90a => PtxVersion::new(8, 0),
        }
    }

    /// Whether `self` supports everything `other` does (same or newer; `sm_90a` ⊇ `sm_90`).
    pub const fn at_least(self, other: Arch) -> bool {
        let arch_specific_ok = match other {
            Arch::Sm90a => matches!(self, Arch::Sm90a),
            _ => true,
        };
        self.sm() >= other.sm() && arch_specific_ok
    }

    /// The target a device of compute capability `major.minor` runs best: the newest supported
    /// target not above it. Compute capability 9.0 is `sm_90a` (it runs `sm_90` and `sm_90a`
    /// modules); newer devices (10.x, 12.x) map to the portable `sm_90`, whose PTX the driver
    /// JIT-compiles forward (arch-specific `sm_90a` code does not run there). `None` below 7.0.
    pub const fn from_compute_capability(major: u32, minor: u32) -> Option<Arch> {
        Some(match (major, minor) {
            (0..=6, _) => return None,
            (7, 0..=4) => Arch::Sm70,
            (7, _) => Arch::Sm75,
            (8, 0..=5) => Arch::Sm80,
            (8, 6..=8) => Arch::Sm86,
            (8, _) => Arch::Sm89,
            (9, 0) => Arch::Sm90a,
            _ => Arch::Sm90,
        })
    }

    /// The best of `targets` for `device`: the highest target the device runs (not above it,
    /// and `sm_90a` only on an `sm_90a` device), or `None` if it runs none of them. Without a
    /// device architecture (the interpreter runs every target) the highest target.
    pub fn best_for(device: Option<Arch>, targets: &[Arch]) -> Option<Arch> {
        targets
            .iter()
            .copied()
            .filter(|&t| device.is_none_or(|d| d.at_least(t)))
            .max()
    }

    // ---- capabilities -------------------------------------------------------------------

    /// Native f16 arithmetic (`add/mul/fma.f16`), sm_53 and later: every supported arch.
    pub const fn has_f16_math(self) -> bool {
        true
    }

    /// bf16 conversions and `fma.rn.bf16` (sm_80+). Earlier archs treat bf16 as a storage type
    /// and convert in software.
    pub const fn has_bf16_math(self) -> bool {
        self.at_least(Arch::Sm80)
    }

    /// `cvt.f32.bf16` and `add/sub/mul.bf16` (sm_90+).
    pub const fn has_bf16_full_math(self) -> bool {
        self.at_least(Arch::Sm90)
    }

    /// Asynchronous global→shared copies (`cp.async`), sm_80+.
    pub const fn has_cp_async(self) -> bool {
        self.at_least(Arch::Sm80)
    }

    /// `ldmatrix`, sm_75+.
    pub const fn has_ldmatrix(self) -> bool {
        self.at_least(Arch::Sm75)
    }

    /// Warp-level `mma.sync.m16n8k8` with f16 inputs (Turing's tensor-core shape), sm_75+.
    pub const fn has_mma_m16n8k8(self) -> bool {
        self.at_least(Arch::Sm75)
    }

    /// Warp-level `mma.sync.m16n8k16` (f16/bf16) and tf32 `m16n8k8`, sm_80+.
    pub const fn has_mma_m16n8k16(self) -> bool {
        self.at_least(Arch::Sm80)
    }

    /// Two f32 rounded into one `f16x2`/`bf16x2` register (`cvt.rn.f16x2.f32`), and
    /// `cvt.rna.tf32.f32`, sm_80+.
    pub const fn has_packed_f32_conversion(self) -> bool {
        self.at_least(Arch::Sm80)
    }

    /// Warpgroup MMA (`wgmma`), sm_90a only.
    pub const fn has_wgmma(self) -> bool {
        matches!(self, Arch::Sm90a)
    }

    /// Warp-wide integer reductions (`redux.sync`), sm_80+.
    pub const fn has_redux_sync(self) -> bool {
        self.at_least(Arch::Sm80)
    }

    /// Tensor-memory accelerator bulk copies (`cp.async.bulk.tensor`), sm_90+.
    pub const fn has_tma(self) -> bool {
        self.at_least(Arch::Sm90)
    }

    /// `.maxnreg`-style register control through `setmaxnreg`, sm_90a.
    pub const fn has_setmaxnreg(self) -> bool {
        matches!(self, Arch::Sm90a)
    }

    // ---- limits --------------------------------------------------------------------------

    /// Maximum threads per block.
    pub const fn max_threads_per_block(self) -> u32 {
        1024
    }

    /// Maximum registers per thread.
    pub const fn max_registers_per_thread(self) -> u32 {
        255
    }

    /// Registers per block (and per SM) available to all threads together.
    pub const fn registers_per_block(self) -> u32 {
        65536
    }

    /// Static (`.shared`) shared memory per block; more needs dynamic shared memory and an opt-in.
    pub const fn max_static_shared_bytes(self) -> u32 {
        48 * 1024
    }

    /// Maximum dynamic shared memory per block after the launch-time opt-in
    /// (`cudaFuncAttributeMaxDynamicSharedMemorySize`), from the CUDA programming guide's
    /// compute-capability table.
    pub const fn max_dynamic_shared_bytes(self) -> u32 {
        match self {
            Arch::Sm70 => 96 * 1024,
            Arch::Sm75 => 64 * 1024,
            Arch::Sm80 => 163 * 1024,
            Arch::Sm86 | Arch::Sm89 => 99 * 1024,
            Arch::Sm90 | Arch::Sm90a => 227 * 1024,
        }
    }

    /// Warp size.
    pub const fn warp_size(self) -> u32 {
        32
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = UnknownArch;

    /// Parses `sm_80`, also accepting `SM_80`, `sm80` and `80`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let digits = lower
            .strip_prefix("sm_")
            .or_else(|| lower.strip_prefix("sm"))
            .unwrap_or(&lower);
        Arch::ALL
            .into_iter()
            .find(|a| &a.name()[3..] == digits)
            .ok_or_else(|| UnknownArch {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_name_and_round_trips() {
        for arch in Arch::ALL {
            assert_eq!(arch.name().parse::<Arch>(), Ok(arch));
            assert_eq!(arch.to_string(), arch.name());
        }
        assert_eq!("SM_86".parse::<Arch>(), Ok(Arch::Sm86));
        assert_eq!("90a".parse::<Arch>(), Ok(Arch::Sm90a));
        let err = "sm_61".parse::<Arch>().unwrap_err();
        assert!(err.to_string().contains("sm_61") && err.to_string().contains("sm_90a"));
    }

    #[test]
    fn capabilities_follow_generations() {
        assert!(!Arch::Sm75.has_bf16_math() && Arch::Sm80.has_bf16_math());
        assert!(!Arch::Sm70.has_ldmatrix() && Arch::Sm75.has_ldmatrix());
        assert!(!Arch::Sm90.has_wgmma() && Arch::Sm90a.has_wgmma());
        assert!(Arch::Sm90a.at_least(Arch::Sm90) && !Arch::Sm90.at_least(Arch::Sm90a));
        assert!(Arch::Sm89.has_cp_async() && !Arch::Sm89.has_bf16_full_math());
        assert!(!Arch::Sm70.has_mma_m16n8k8() && Arch::Sm75.has_mma_m16n8k8());
        assert!(!Arch::Sm75.has_mma_m16n8k16() && Arch::Sm80.has_mma_m16n8k16());
    }

    #[test]
    fn ptx_versions_increase_with_arch() {
        for pair in Arch::ALL.windows(2) {
            assert!(pair[0].min_ptx_version() <= pair[1].min_ptx_version());
        }
        assert_eq!(Arch::Sm80.min_ptx_version().to_string(), "7.0");
    }

    #[test]
    fn dynamic_shared_memory_exceeds_static_everywhere() {
        for arch in Arch::ALL {
            assert!(arch.max_dynamic_shared_bytes() > arch.max_static_shared_bytes());
        }
    }
}
