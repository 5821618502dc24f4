//! Lints over emitted PTX: rules about what a kernel computes that the validator, which checks
//! one instruction at a time, cannot see.

pub mod address;
