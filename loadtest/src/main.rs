//! `vx-loadtest`: see [`vx_loadtest::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    vx_loadtest::cli::main_from(std::env::args_os())
}
