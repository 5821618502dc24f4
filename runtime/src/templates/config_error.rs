//! Configuration errors that name the field(s) at fault, so the macros can point at the argument.

use std::fmt;

/// One violated configuration rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The configuration fields responsible, most responsible first (macro argument names).
    pub fields: Vec<&'static str>,
    /// The rule and the values, e.g. "top_k = 9 exceeds experts = 8".
    pub message: String,
}

impl ConfigError {
    pub fn new(fields: &[&'static str], message: impl Into<String>) -> Self {
        Self {
            fields: fields.to_vec(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (field: {})", self.message, self.fields.join(", "))
    }
}

impl std::error::Error for ConfigError {}

/// Every rule a configuration violates, reported together.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn push(&mut self, fields: &[&'static str], message: impl Into<String>) {
        self.0.push(ConfigError::new(fields, message));
    }

    /// `Ok(())` when no rule was violated.
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
