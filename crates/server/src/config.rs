//! What to serve and where: from the command line or a TOML file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xraid_member::MemberFault;

use crate::tls::{TlsFiles, TlsMode};

use crate::ServerError;

/// The port NBD clients try when none is given.
pub const DEFAULT_PORT: u16 = 10809;

/// Connections served at once unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Default for Listen {
    fn default() -> Listen {
        Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)))
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One export: an array (member paths or their folder) or a plain file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// The name clients ask for; the first export also answers the default name "".
    pub name: String,
    /// Member paths, a folder holding them, or one plain file.
    pub paths: Vec<PathBuf>,
    #[serde(default)]
    pub read_only: bool,
    /// Members to wrap in injected faults (command line only, for demonstrations).
    #[serde(skip)]
    pub faults: Vec<MemberFault>,
    /// Pace of a rebuild or resync while clients are busy, MB/s (md's sync_speed_min).
    #[serde(default)]
    pub rebuild_min: Option<u64>,
    /// Pace of a rebuild or resync when clients are idle, MB/s; none: no cap (md's
    /// sync_speed_max).
    #[serde(default)]
    pub rebuild_max: Option<u64>,
    /// "log" (default: the stripe log closes the write hole) or "resync".
    #[serde(default)]
    pub consistency: Option<String>,
}

/// Refuses a rebuild pace whose floor while clients are busy (`min`, MB/s; 1 if
/// none) stands above its cap while they are idle (`max`; none or 0: no cap): the
/// engine would rebuild faster the busier the clients. md clamps its sync_speed_min
/// to the max; a pace given by hand this way is a mistake worth saying.
pub fn check_rebuild_pace(min: Option<u64>, max: Option<u64>) -> Result<(), String> {
    let min = min.unwrap_or(1);
    match max.filter(|&max| max > 0) {
        Some(max) if min > max => Err(format!(
            "--rebuild-min {min} is above --rebuild-max {max} (MB/s per member): the pace while clients are busy cannot exceed the pace while they are idle (0 or no --rebuild-max: no cap)"
        )),
        _ => Ok(()),
    }
}

/// Everything `xraid serve` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    pub listen: Listen,
    pub exports: Vec<ExportConfig>,
    pub max_connections: usize,
    pub tls_mode: TlsMode,
    pub tls_files: Option<TlsFiles>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<String>,
    socket: Option<PathBuf>,
    max_connections: Option<usize>,
    tls: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default, rename = "export")]
    exports: Vec<ExportConfig>,
}

impl ServeConfig {
    /// Reads a TOML file:
    ///
    /// ```toml
    /// listen = "127.0.0.1:10809"   # or: socket = "/run/xraid.sock"
    /// max_connections = 64
    /// [[export]]
    /// name = "media"
    /// paths = ["/srv/disks"]
    /// [[export]]
    /// name = "scratch"
    /// paths = ["/srv/scratch.img"]
    /// read_only = true
    /// ```
    pub fn from_file(path: &Path) -> Result<ServeConfig, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServerError::Config {
            path: path.to_path_buf(),
            detail: source.to_string(),
        })?;
        ServeConfig::from_toml(&text).map_err(|detail| ServerError::Config {
            path: path.to_path_buf(),
            detail,
        })
    }

    fn from_toml(text: &str) -> Result<ServeConfig, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        let listen = match (file.listen, file.socket) {
            (Some(_), Some(_)) => return Err("give either listen or socket, not both".to_owned()),
            (Some(addr), None) => Listen::Tcp(parse_listen(&addr)?),
            (None, Some(path)) => Listen::Unix(path),
            (None, None) => Listen::default(),
        };
        let tls_files = match (file.tls_cert, file.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => return Err("give both tls_cert and tls_key".to_owned()),
        };
        let tls_mode = match (file.tls.as_deref(), &tls_files) {
            (Some(mode), _) => mode.parse()?,
            (None, Some(_)) => TlsMode::Allow,
            (None, None) => TlsMode::Off,
        };
        let config = ServeConfig {
            listen,
            exports: file.exports,
            max_connections: file.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            tls_mode,
            tls_files,
        };
        config.check()?;
        Ok(config)
    }

    /// Refuses configurations that cannot be served.
    pub fn check(&self) -> Result<(), String> {
        if self.exports.is_empty() {
            return Err("no exports: add an [[export]] with a name and paths".to_owned());
        }
        if self.tls_mode != TlsMode::Off && self.tls_files.is_none() {
            return Err("TLS needs a certificate and a key (tls_cert, tls_key)".to_owned());
        }
        if self.max_connections == 0 {
            return Err("max_connections must be at least 1".to_owned());
        }
        for (i, e) in self.exports.iter().enumerate() {
            if e.paths.is_empty() {
                return Err(format!("export '{}' has no paths", e.name));
            }
            if e.name.len() > 4096 {
                return Err(format!(
                    "export {i}'s name is longer than NBD allows (4096 bytes)"
                ));
            }
            if self.exports[..i].iter().any(|o| o.name == e.name) {
                return Err(format!("export name '{}' is used twice", e.name));
            }
        }
        Ok(())
    }
}

/// toml's error in one line: where and why. (Its own display spans several lines: a
/// position, the offending line drawn with a caret, and only then the reason.)
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match e.span() {
        Some(span) => {
            let (line, column) = line_and_column(text, span.start);
            format!("line {line}, column {column}: {reason}")
        }
        None => reason,
    }
}

/// The line and column (both from 1, columns in characters) of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

/// `ADDR:PORT`, `ADDR` (port 10809) or `:PORT` (127.0.0.1).
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{text}' is not a port number"))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    Err(format!(
        "'{text}' is not an address: use ADDR:PORT, e.g. 127.0.0.1:10809"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_with_two_exports() {
        let c = ServeConfig::from_toml(
            "socket = \"/tmp/x.sock\"\nmax_connections = 3\n[[export]]\nname = \"a\"\npaths = [\"d\"]\n[[export]]\nname = \"b\"\npaths = [\"f.img\"]\nread_only = true\n",
        )
        .expect("valid");
        assert_eq!(c.listen, Listen::Unix("/tmp/x.sock".into()));
        assert_eq!(c.max_connections, 3);
        assert_eq!(c.exports.len(), 2);
        assert!(c.exports[1].read_only);
    }

    #[test]
    fn bad_configs_are_refused_in_one_line() {
        for text in [
            "",
            "listen = \"nowhere\"\n[[export]]\nname = \"a\"\npaths = [\"d\"]\n",
            "[[export]]\nname = \"a\"\npaths = []\n",
            "[[export]]\nname = \"a\"\npaths = [\"d\"]\n[[export]]\nname = \"a\"\npaths = [\"e\"]\n",
            "[[export]]\nname = \"a\"\npaths = [\"d\"]\ncolour = 1\n",
            "[[export\n",
        ] {
            let err = ServeConfig::from_toml(text).expect_err(text);
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn toml_errors_say_where_and_why() {
        let export = "[[export]]\nname = \"a\"\npaths = [\"d\"]\n";
        for (text, wanted) in [
            (
                format!("{export}colour = 1\n"),
                "line 4, column 1: unknown field `colour`, expected one of `name`, `paths`",
            ),
            (
                "[[export]]\nname = \"a\"\n".to_owned(),
                "missing field `paths`",
            ),
            (
                "[[export]]\npaths = [\"d\"]\n".to_owned(),
                "missing field `name`",
            ),
            (
                format!("max_connections = \"many\"\n{export}"),
                "line 1, column 19: invalid type: string \"many\", expected usize",
            ),
        ] {
            let err = ServeConfig::from_toml(&text).expect_err(&text);
            assert!(err.contains(wanted), "{text:?}: {err}");
            assert!(err.starts_with("line "), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{text:?}: {err}");
        }
    }

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        assert_eq!(line_and_column("ab\ncé = 1", 0), (1, 1));
        assert_eq!(line_and_column("ab\ncé = 1", 3), (2, 1));
        assert_eq!(line_and_column("ab\ncé = 1", 6), (2, 3));
        assert_eq!(line_and_column("ab", 99), (1, 3));
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen(":9000").expect("port").port(), 9000);
        assert_eq!(parse_listen("127.0.0.2").expect("ip").port(), DEFAULT_PORT);
        assert!(parse_listen("x:y").is_err());
    }
}
