//! TLS for NBD (NBD_OPT_STARTTLS) with rustls: loading the certificate and key, the
//! server's policy (off, allowed, required), and a connection that is plain or TLS and
//! can be split into a reading and a writing half for the two threads of an array
//! connection.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

use crate::stream::Stream;
use crate::ServerError;

/// Whether clients may, must or cannot use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: NBD_OPT_STARTTLS is refused.
    #[default]
    Off,
    /// TLS when the client asks for it.
    Allow,
    /// Every client must start TLS before anything else.
    Require,
}

impl std::str::FromStr for TlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<TlsMode, String> {
        match s {
            "off" => Ok(TlsMode::Off),
            "allow" => Ok(TlsMode::Allow),
            "require" => Ok(TlsMode::Require),
            _ => Err(format!(
                "'{s}' is not a TLS mode: use off, allow or require"
            )),
        }
    }
}

/// Where the server's certificate chain and private key are (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The server's TLS policy, ready to use.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tls {
    pub mode: TlsMode,
    pub config: Option<Arc<ServerConfig>>,
}

impl Tls {
    pub(crate) fn load(mode: TlsMode, files: Option<&TlsFiles>) -> Result<Tls, ServerError> {
        if mode == TlsMode::Off {
            return Ok(Tls::default());
        }
        let Some(files) = files else {
            return Err(ServerError::Invalid(
                "TLS needs a certificate and a key: give --tls-cert and --tls-key".to_owned(),
            ));
        };
        let bad = |path: &Path, detail: String| ServerError::Config {
            path: path.to_path_buf(),
            detail,
        };
        let certs = CertificateDer::pem_file_iter(&files.cert)
            .map_err(|e| bad(&files.cert, format!("not a PEM certificate file: {e}")))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(&files.cert, format!("not a PEM certificate file: {e}")))?;
        if certs.is_empty() {
            return Err(bad(&files.cert, "holds no certificate".to_owned()));
        }
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|e| bad(&files.key, format!("not a PEM private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ServerError::Invalid(format!("TLS setup: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad(&files.key, format!("does not fit the certificate: {e}")))?;
        Ok(Tls {
            mode,
            config: Some(Arc::new(config)),
        })
    }
}

/// A client connection, plain or TLS. Clones share the TLS state: one clone reads
/// (the only one that reads the socket), the others write.
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(Stream),
    Tls {
        sock: Stream,
        state: Arc<Mutex<ServerConnection>>,
        /// Bytes read from the socket that rustls has not taken yet (the reading
        /// clone's own; rustls takes no more while decrypted data waits to be read).
        pending: Vec<u8>,
    },
}

impl Conn {
    pub(crate) fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Plain(s) => Conn::Plain(s.try_clone()?),
            Conn::Tls { sock, state, .. } => Conn::Tls {
                sock: sock.try_clone()?,
                state: Arc::clone(state),
                pending: Vec::new(),
            },
        })
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls { .. })
    }

    /// Runs the TLS handshake on a plain connection and turns it into a TLS one.
    pub(crate) fn start_tls(self, config: Arc<ServerConfig>) -> io::Result<Conn> {
        let Conn::Plain(mut sock) = self else {
            return Err(io::Error::other("TLS is already on"));
        };
        let mut tls = ServerConnection::new(config).map_err(io::Error::other)?;
        while tls.is_handshaking() {
            tls.complete_io(&mut sock)?;
        }
        Ok(Conn::Tls {
            sock,
            state: Arc::new(Mutex::new(tls)),
            pending: Vec::new(),
        })
    }

    /// Ends the connection both ways at once, for every clone: a thread blocked on
    /// it wakes with an error or the end of the stream.
    pub(crate) fn abort(&self) {
        match self {
            Conn::Plain(sock) | Conn::Tls { sock, .. } => sock.shutdown(Shutdown::Both),
        }
    }

    /// Sends TLS's close_notify (nothing for plain connections).
    pub(crate) fn close(&mut self) {
        if let Conn::Tls { sock, state, .. } = self {
            let mut tls = state.lock().unwrap_or_else(PoisonError::into_inner);
            tls.send_close_notify();
            while tls.wants_write() {
                if tls.write_tls(sock).is_err() {
                    break;
                }
            }
            sock.shutdown(Shutdown::Write);
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (sock, state, pending) = match self {
            Conn::Plain(s) => return s.read(buf),
            Conn::Tls {
                sock,
                state,
                pending,
            } => (sock, state, pending),
        };
        let mut raw = [0u8; 16 * 1024];
        loop {
            let mut tls = state.lock().unwrap_or_else(PoisonError::into_inner);
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let eof = if pending.is_empty() {
                // The socket is read without the lock, so the writing half is never
                // held up by a client that has nothing to send.
                drop(tls);
                let n = sock.read(&mut raw)?;
                pending.extend_from_slice(&raw[..n]);
                tls = state.lock().unwrap_or_else(PoisonError::into_inner);
                n == 0
            } else {
                false
            };
            // Feed rustls what it takes, decrypting as it goes; stop as soon as there
            // is decrypted data, which must be read before rustls takes more.
            let mut rest: &[u8] = pending;
            let taken_before = rest.len();
            if eof {
                tls.read_tls(&mut rest)?;
                tls.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            while !rest.is_empty() {
                tls.read_tls(&mut rest)?;
                let state = tls
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if state.plaintext_bytes_to_read() > 0 {
                    break;
                }
            }
            let used = taken_before - rest.len();
            pending.drain(..used);
            while tls.wants_write() {
                tls.write_tls(sock)?;
            }
            if eof {
                // End of stream: what the TLS layer had is all there is.
                return match tls.reader().read(buf) {
                    Ok(n) => Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                    Err(e) => Err(e),
                };
            }
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls { sock, state, .. } => {
                let mut tls = state.lock().unwrap_or_else(PoisonError::into_inner);
                // rustls buffers a limited amount of plaintext: hand it over in the
                // pieces it accepts, sending the records between pieces.
                let mut rest = buf;
                while !rest.is_empty() {
                    let n = tls.writer().write(rest)?;
                    rest = &rest[n..];
                    while tls.wants_write() {
                        tls.write_tls(sock)?;
                    }
                }
                Ok(buf.len())
            }
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write_vectored(bufs),
            Conn::Tls { .. } => {
                let mut total = 0;
                for b in bufs {
                    self.write_all(b)?;
                    total += b.len();
                }
                Ok(total)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
