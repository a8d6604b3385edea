//! The `forgerunner` operator binary: subcommands `run`, `crd` and `version`.

use std::process::ExitCode;

fn main() -> ExitCode {
    forgerunner::main_with_args(std::env::args_os())
}
