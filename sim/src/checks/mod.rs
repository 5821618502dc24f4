//! Sanitizer policy and state. [`CheckConfig`] is built once per launch from the public
//! `Options`; the engine consults it only at the few places where a check applies (memory access,
//! barrier resolution, warp-collective arrival, fuel), never per arithmetic instruction.
//! The race detector lives in [`race`]; memcheck and initcheck need no state beyond the memory
//! itself (per-byte init bits in `memory`); synccheck works on the block's barrier state in `exec`.

pub mod race;

/// Which checks run in a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckConfig {
    pub memcheck: bool,
    pub initcheck: bool,
    pub racecheck: bool,
    pub synccheck: bool,
    /// `cp.async` hazards: pending destinations touched, pending sources written, copies never
    /// waited.
    pub asynccheck: bool,
    /// Instructions one thread may execute before `FuelExhausted`.
    pub fuel: u64,
}
