//! The moe kernel family.
