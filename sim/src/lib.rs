//! ptxforge-sim: a PTX interpreter with sanitizer checks and counters.
