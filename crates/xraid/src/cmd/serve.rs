//! `xraid serve`: exports arrays or plain files over NBD until SIGINT or SIGTERM.

use anyhow::{anyhow, Result};
use xraid_driver::BackendChoice;
use xraid_server::{
    block_stop_signals, parse_listen, stop_on_signals, Closed, ExportConfig, Listen, ServeConfig,
    Server, TlsFiles, TlsMode,
};

use super::shell_word;
use crate::cli::ServeArgs;
use crate::size::human;

pub fn run(args: ServeArgs, backend: BackendChoice) -> Result<()> {
    if args.force {
        force(&args.array)?;
    }
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

/// `--force`: takes back the members whose failure stopped the array, saying which.
fn force(array: &[std::path::PathBuf]) -> Result<()> {
    let forced = xraid_array::force_start(array)?;
    if forced.is_empty() {
        eprintln!("xraid: --force: the array starts without it; nothing is taken back");
    }
    for f in forced {
        eprintln!(
            "xraid: --force: {} is taken back into role {} (it failed with the array, at event {}, and holds every write the array acknowledged)",
            f.path.display(),
            f.role,
            f.events
        );
    }
    Ok(())
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
    let tls = config.tls_mode == TlsMode::Require;
    for (name, size, description) in server.exports() {
        let reach = Reach {
            listen: &config.listen,
            address: &address,
            name: &name,
            tls,
        };
        say(&format!(
            "serving '{name}' ({}, {description}) at {}",
            human(size),
            reach.uri(false)
        ));
        for line in reach.command_lines() {
            say(&format!("  {line}"));
        }
    }
    say(&format!(
        "listening on {address}; stop with Ctrl-C or SIGTERM"
    ));
    match server.run()? {
        Closed::Clean => say("stopped; arrays flushed and marked clean"),
        // The log said which array; the next start goes on with its resync.
        Closed::ResyncUnfinished => say(
            "stopped; arrays flushed; not marked clean where a resync is left unfinished (see above), which the next start goes on with",
        ),
        // The log said which array and why; the next start resyncs it.
        Closed::NotClean => say("stopped; not every array could be marked clean (see above)"),
    }
    Ok(())
}

/// Where a client finds one export, for the command lines the server prints.
pub(crate) struct Reach<'a> {
    pub listen: &'a Listen,
    /// The address the server is bound to (TCP) or its socket's path.
    pub address: &'a str,
    pub name: &'a str,
    /// Whether clients must start TLS (`--tls require`): they then name a folder DIR
    /// holding the CA certificate, which the server cannot know.
    pub tls: bool,
}

/// The placeholder for the client's folder of CA certificates in printed lines.
const CA_DIR: &str = "DIR";

impl Reach<'_> {
    /// The export's NBD URI (with `tls-certificates=DIR` for TLS clients when
    /// `with_ca`): the name is percent-encoded, as a URI's path must be.
    pub(crate) fn uri(&self, with_ca: bool) -> String {
        let scheme = if self.tls { "nbds" } else { "nbd" };
        let path = percent_encoded(self.name, "");
        let ca = format!("tls-certificates={CA_DIR}");
        match self.listen {
            Listen::Tcp(_) if with_ca && self.tls => {
                format!("{scheme}://{}/{path}?{ca}", self.address)
            }
            Listen::Tcp(_) => format!("{scheme}://{}/{path}", self.address),
            Listen::Unix(socket) => {
                let socket = percent_encoded(&socket.to_string_lossy(), "/");
                let ca = if with_ca && self.tls {
                    format!("&{ca}")
                } else {
                    String::new()
                };
                format!("{scheme}+unix:///{path}?socket={socket}{ca}")
            }
        }
    }

    /// Command lines of qemu and libnbd's tools that reach the export, quoted for the
    /// shell; for TLS, with a line that says what DIR stands for.
    pub(crate) fn command_lines(&self) -> Vec<String> {
        let uri = shell_word(&self.uri(true));
        let mut lines = vec![
            format!("qemu-img info {}", self.qemu_image()),
            format!("nbdinfo {uri}"),
            format!("nbdcopy {uri} copy.img"),
        ];
        if self.tls {
            lines.push(format!(
                "where {CA_DIR} is a folder holding ca-cert.pem, the certificate of the CA that signed the server's"
            ));
        }
        lines
    }

    /// qemu's arguments naming the export: its URI, or, as qemu knows no `nbds://`,
    /// TLS credentials and the export spelt out as options.
    fn qemu_image(&self) -> String {
        if !self.tls {
            return shell_word(&self.uri(false));
        }
        let server = match self.listen {
            Listen::Tcp(_) => match self.address.parse::<std::net::SocketAddr>() {
                Ok(addr) => format!("host={},port={}", addr.ip(), addr.port()),
                Err(_) => format!("host={}", qemu_value(self.address)),
            },
            // qemu checks the certificate against a host name, and a socket has
            // none: libnbd's tools assume "localhost" there, and so does this line.
            Listen::Unix(socket) => format!(
                "server.type=unix,server.path={},tls-hostname=localhost",
                qemu_value(&socket.to_string_lossy())
            ),
        };
        let creds = format!("tls-creds-x509,id=tls0,dir={CA_DIR},endpoint=client");
        let image = format!(
            "driver=nbd,{server},export={},tls-creds=tls0",
            qemu_value(self.name)
        );
        format!(
            "--object {} --image-opts {}",
            shell_word(&creds),
            shell_word(&image)
        )
    }
}

/// `text` as a value in qemu's KEY=VALUE,... options, where a comma is written twice.
fn qemu_value(text: &str) -> String {
    text.replace(',', ",,")
}

/// `text` with every byte but RFC 3986's unreserved characters (letters, digits,
/// `-._~`) and those in `keep` written as `%XX`, as a URI's components need.
pub(crate) fn percent_encoded(text: &str, keep: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        let c = char::from(b);
        if b.is_ascii_alphanumeric() || "-._~".contains(c) || (b.is_ascii() && keep.contains(c)) {
            out.push(c);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One line on standard output; a closed output (`xraid serve | head`) must not stop
/// the server, so a failed write is dropped.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::{percent_encoded, Reach};
    use crate::cmd::shell_word;
    use xraid_server::Listen;

    #[test]
    fn export_names_are_percent_encoded_in_uris() {
        assert_eq!(percent_encoded("xraid", ""), "xraid");
        assert_eq!(percent_encoded("my disk#1", ""), "my%20disk%231");
        assert_eq!(percent_encoded("a/b?c%d&é~", ""), "a%2Fb%3Fc%25d%26%C3%A9~");
        assert_eq!(percent_encoded("/run/x y.sock", "/"), "/run/x%20y.sock");
    }

    #[test]
    fn tls_lines_name_the_ca_folder_and_spell_out_qemu_options() {
        let tcp = Listen::Tcp("127.0.0.1:10809".parse().expect("address"));
        let reach = Reach {
            listen: &tcp,
            address: "127.0.0.1:10809",
            name: "a,b c",
            tls: true,
        };
        assert_eq!(
            reach.command_lines()[..3],
            [
                "qemu-img info --object tls-creds-x509,id=tls0,dir=DIR,endpoint=client \
                 --image-opts 'driver=nbd,host=127.0.0.1,port=10809,export=a,,b c,tls-creds=tls0'"
                    .to_owned(),
                "nbdinfo 'nbds://127.0.0.1:10809/a%2Cb%20c?tls-certificates=DIR'".to_owned(),
                "nbdcopy 'nbds://127.0.0.1:10809/a%2Cb%20c?tls-certificates=DIR' copy.img"
                    .to_owned(),
            ]
        );
        let unix = Listen::Unix("/tmp/s.sock".into());
        let reach = Reach {
            listen: &unix,
            address: "/tmp/s.sock",
            name: "xraid",
            tls: false,
        };
        assert_eq!(reach.uri(true), "nbd+unix:///xraid?socket=/tmp/s.sock");
        assert_eq!(reach.command_lines().len(), 3, "no DIR to explain");
    }

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
