//! The `bulkhead` command: parse the arguments, hand them to the command, print errors and
//! exit with the command's code. The work is in the library; see docs/ARCHITECTURE.md.

#![forbid(unsafe_code)]

mod args;
mod cmd;
mod show;

fn main() {
    // Die quietly on a closed pipe (`bulkhead status | head`), as Unix tools do.
    bulkhead::sys::signals::default(libc::SIGPIPE);
    let cli = args::parse();
    let code = match cmd::dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            cmd::report(&e.diagnostics());
            e.exit_code()
        }
    };
    std::process::exit(code);
}
