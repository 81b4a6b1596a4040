//! `xraid serve`: exports arrays or plain files over NBD until SIGINT or SIGTERM.

use anyhow::{anyhow, Result};
use xraid_driver::BackendChoice;
use xraid_server::{
    block_stop_signals, parse_listen, stop_on_signals, ExportConfig, Listen, ServeConfig, Server,
    TlsFiles, TlsMode,
};

use super::shell_word;
use crate::cli::ServeArgs;
use crate::size::human;

pub fn run(args: ServeArgs, backend: BackendChoice) -> Result<()> {
    let config = match &args.config {
        Some(path) => ServeConfig::from_file(path)?,
        None => ServeConfig {
            listen: listen_of(args.listen.as_deref(), args.socket.clone())?,
            exports: vec![ExportConfig {
                name: args.name.clone(),
                paths: args.array.clone(),
                read_only: args.read_only,
                faults: args.fault.clone(),
                rebuild_min: args.rebuild_min,
                rebuild_max: args.rebuild_max,
                consistency: args.consistency.clone(),
            }],
            max_connections: args.max_connections,
            tls_files: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            tls_mode: args.tls.unwrap_or(if args.tls_cert.is_some() {
                TlsMode::Allow
            } else {
                TlsMode::Off
            }),
        },
    };
    serve(&config, backend)
}

/// Where to listen, from `--listen` / `--socket`.
pub(crate) fn listen_of(
    listen: Option<&str>,
    socket: Option<std::path::PathBuf>,
) -> Result<Listen> {
    Ok(match (listen, socket) {
        (_, Some(path)) => Listen::Unix(path),
        (Some(addr), None) => {
            Listen::Tcp(parse_listen(addr).map_err(|e| anyhow!("--listen: {e}"))?)
        }
        (None, None) => Listen::default(),
    })
}

/// Starts the server, says how to reach it, and runs until a stop signal.
pub(crate) fn serve(config: &ServeConfig, backend: BackendChoice) -> Result<()> {
    // Member paths as the server shows them (status, logs) mean the same from any
    // folder a client runs in: absolute, as members added while served are.
    let mut config = config.clone();
    for export in &mut config.exports {
        for path in &mut export.paths {
            if let Ok(absolute) = std::path::absolute(&*path) {
                *path = absolute;
            }
        }
    }
    let config = &config;
    // Before any thread starts, so that every thread inherits the blocked mask.
    let power_cut = config
        .exports
        .iter()
        .flat_map(|e| &e.faults)
        .any(|f| f.plan.on_machine_power);
    let signals = block_stop_signals(power_cut)?;
    let server = Server::start(config, backend)?;
    stop_on_signals(signals, server.shutdown_handle())?;
    let address = server.address().to_owned();
    for (name, size, description) in server.exports() {
        let scheme = if config.tls_mode == TlsMode::Require {
            "nbds"
        } else {
            "nbd"
        };
        let uri = match &config.listen {
            Listen::Tcp(_) => format!("{scheme}://{address}/{name}"),
            Listen::Unix(path) => format!("{scheme}+unix:///{name}?socket={}", path.display()),
        };
        // Quoted for the shell: a Unix socket's URI holds a '?'.
        let arg = shell_word(&uri);
        say(&format!(
            "serving '{name}' ({}, {description}) at {uri}",
            human(size)
        ));
        say(&format!("  qemu-img info {arg}"));
        say(&format!("  nbdcopy {arg} copy.img"));
        say(&format!("  nbdfuse mnt/disk {arg}"));
    }
    say(&format!(
        "listening on {address}; stop with Ctrl-C or SIGTERM"
    ));
    server.run()?;
    say("stopped; arrays flushed and marked clean");
    Ok(())
}

/// One line on standard output; a closed output (`xraid serve | head`) must not stop
/// the server, so a failed write is dropped.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use crate::cmd::shell_word;

    #[test]
    fn uris_are_quoted_for_the_shell_where_they_need_it() {
        assert_eq!(
            shell_word("nbd://127.0.0.1:10809/xraid"),
            "nbd://127.0.0.1:10809/xraid"
        );
        assert_eq!(
            shell_word("nbd+unix:///xraid?socket=/tmp/s.sock"),
            "'nbd+unix:///xraid?socket=/tmp/s.sock'"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
