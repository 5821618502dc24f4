//! `ptxforge-sim run KERNEL.ptx ...`: runs one kernel in the interpreter and prints a JSON report.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(ptxforge_sim::cli::main_with(&args));
}
