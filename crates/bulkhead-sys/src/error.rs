//! Errors a user can cause, with where and what to do.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Note,
}

/// One finding about the user's input: what, where, and what to do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// `file:line:col`, or a cgroup path.
    pub location: Option<String>,
    /// The slice and directive concerned, e.g. `[slice.db-helper] MemoryHigh`.
    pub context: Option<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            location: None,
            context: None,
            message: message.into(),
            hint: None,
        }
    }
    pub fn warning(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(message)
        }
    }
    pub fn note(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Note,
            ..Diagnostic::error(message)
        }
    }
    pub fn at(mut self, location: impl Into<String>) -> Self {
        self.location = Some(location.into());
        self
    }
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        write!(f, "{sev}: ")?;
        if let Some(l) = &self.location {
            write!(f, "{l}: ")?;
        }
        if let Some(c) = &self.context {
            write!(f, "{c}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong in bulkhead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: nothing was changed. Exit code 2.
    #[error("{}", display_all(.0))]
    Invalid(Vec<Diagnostic>),
    /// Something failed while acting on the system. Exit code 1.
    #[error("{}", Diagnostic { severity: Severity::Error, ..(**.0).clone() })]
    Failed(Box<Diagnostic>),
}

fn display_all(d: &[Diagnostic]) -> String {
    d.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    pub fn invalid(d: Diagnostic) -> Error {
        Error::Invalid(vec![d])
    }
    pub fn failed(message: impl Into<String>) -> Error {
        Error::Failed(Box::new(Diagnostic::error(message)))
    }
    pub fn failed_with(d: Diagnostic) -> Error {
        Error::Failed(Box::new(d))
    }
    pub fn with_hint(self, hint: impl Into<String>) -> Error {
        match self {
            Error::Invalid(mut ds) => {
                if let Some(d) = ds.last_mut() {
                    d.hint = Some(hint.into());
                }
                Error::Invalid(ds)
            }
            Error::Failed(mut d) => {
                d.hint = Some(hint.into());
                Error::Failed(d)
            }
        }
    }
    /// The process exit code that goes with this error (systemd's convention: 2 for bad
    /// arguments or configuration, 1 for a failure while acting).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Invalid(_) => 2,
            Error::Failed(_) => 1,
        }
    }
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            Error::Invalid(d) => d.clone(),
            Error::Failed(d) => vec![(**d).clone()],
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An I/O error on a path, as a failure that names the path.
pub fn io_failed(what: &str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::failed(format!("{what} {}: {}", path.display(), errno_text(&e)))
}

/// `No such file or directory` without Rust's ` (os error 2)` tail.
pub fn errno_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
