//! The shared files `~/.aws/credentials` and `~/.aws/config`: one profile's
//! keys, its static credentials or `credential_process`, its `region` and
//! `endpoint_url`.

use super::{CredentialsError, CredentialsProvider, Source};
use crate::sign::Credentials;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// Keys that need SSO, an assumed role or a web identity: a profile holding
/// one is refused with an error naming it rather than used half-way.
const UNSUPPORTED: [&str; 6] = [
    "role_arn",
    "source_profile",
    "credential_source",
    "web_identity_token_file",
    "sso_session",
    "login_session",
];

/// The selected profile, merged from both files (the credentials file wins
/// key by key, as in the AWS CLI). Its `Debug` names the keys, never their
/// values (a value may be a secret key or a session token).
#[derive(Clone, Default)]
pub(crate) struct Profile {
    pub(crate) name: String,
    /// Whether either file has a section for it.
    pub(crate) found: bool,
    /// Whether it was named by `AWS_PROFILE` (a missing one is an error).
    explicit: bool,
    files: Vec<PathBuf>,
    keys: BTreeMap<String, String>,
}

impl fmt::Debug for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profile")
            .field("name", &self.name)
            .field("found", &self.found)
            .field("explicit", &self.explicit)
            .field("files", &self.files)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Profile {
    /// The profile's name: `AWS_PROFILE`, else `default`.
    pub(crate) fn selected_name(env: &dyn Fn(&str) -> Option<String>) -> String {
        env("AWS_PROFILE")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "default".into())
    }

    /// Read the selected profile from the files `env` points at. Missing
    /// files are empty.
    ///
    /// The error (a file that exists but cannot be read) never holds a
    /// secret.
    pub(crate) fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<Profile, String> {
        let var = |name: &str| env(name).filter(|v| !v.is_empty());
        let name = Self::selected_name(env);
        let home = var("HOME").map(PathBuf::from);
        let in_home = |file: &str| home.as_ref().map(|h| h.join(".aws").join(file));
        let credentials_file = var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| in_home("credentials"));
        let config_file = var("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .or_else(|| in_home("config"));
        let mut profile = Profile {
            explicit: var("AWS_PROFILE").is_some(),
            name: name.clone(),
            ..Profile::default()
        };
        let config_section = if name == "default" {
            "default".to_string()
        } else {
            format!("profile {name}")
        };
        // The config file first, so the credentials file overrides it.
        for (file, section) in [(config_file, config_section), (credentials_file, name)] {
            let Some(file) = file else { continue };
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
            };
            if let Some(keys) = parse_ini(&text).remove(&section) {
                profile.found = true;
                profile.keys.extend(keys);
            }
            profile.files.push(file);
        }
        Ok(profile)
    }

    /// A key's value, when set and not empty.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Why this profile did not give credentials (for the "none found"
    /// error).
    pub(crate) fn why_not_configured(&self) -> String {
        let files = self
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match (self.found, self.files.is_empty()) {
            (_, true) => "no shared credentials or config file".into(),
            (false, false) => format!("no profile {:?} in {files}", self.name),
            (true, false) => format!(
                "profile {:?} in {files} has no aws_access_key_id or credential_process",
                self.name
            ),
        }
    }

    /// The provider this profile configures, `None` when it configures
    /// none.
    ///
    /// # Errors
    ///
    /// [`CredentialsError::Unsupported`] naming a key this crate does not
    /// support; [`CredentialsError::Source`] for a profile named by
    /// `AWS_PROFILE` that neither file holds, or static keys without their
    /// secret.
    pub(crate) fn credentials(&self) -> Result<Option<CredentialsProvider>, CredentialsError> {
        let source = Source::Profile {
            name: self.name.clone(),
        };
        if self.explicit && !self.found {
            return Err(CredentialsError::Source {
                source,
                why: format!("AWS_PROFILE names it, but {}", self.why_not_configured()),
            });
        }
        if let Some(key) = self
            .keys
            .keys()
            .find(|k| UNSUPPORTED.contains(&k.as_str()) || k.starts_with("sso_"))
        {
            return Err(CredentialsError::Unsupported {
                profile: self.name.clone(),
                key: key.clone(),
            });
        }
        if let Some(access_key) = self.get("aws_access_key_id") {
            let Some(secret) = self.get("aws_secret_access_key") else {
                return Err(CredentialsError::Source {
                    source,
                    why: "aws_access_key_id is set but aws_secret_access_key is not".into(),
                });
            };
            let mut credentials = Credentials::new(access_key, secret);
            if let Some(token) = self.get("aws_session_token") {
                credentials = credentials.with_session_token(token);
            }
            return Ok(Some(
                CredentialsProvider::fixed(credentials).with_source(source),
            ));
        }
        if let Some(command) = self.get("credential_process") {
            return Ok(Some(super::process::provider(&self.name, command)));
        }
        Ok(None)
    }
}

/// Sections of an INI file, each a map of its keys. Comments (`#`, `;`)
/// and blank lines are skipped; indented lines under a key are its
/// sub-settings, stored as `parent.key` (`s3.addressing_style` from
/// `s3 =` followed by `  addressing_style = path`), so they never stand in
/// for a key of the profile itself.
fn parse_ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut sections: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    // The last key at the top level of the section, parent of indented ones.
    let mut parent: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            let line = line.trim();
            if line.starts_with(['#', ';']) {
                continue;
            }
            if let (Some(section), Some(parent), Some((key, value))) =
                (&current, &parent, line.split_once('='))
            {
                sections.entry(section.clone()).or_default().insert(
                    format!("{parent}.{}", key.trim().to_ascii_lowercase()),
                    value.trim().to_string(),
                );
            }
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or("");
            // `[profile  name]` and `[ name ]` as the CLI reads them.
            let name = header.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            parent = None;
            continue;
        }
        let (Some(section), Some((key, value))) = (&current, line.split_once('=')) else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        parent = Some(key.clone());
        sections
            .entry(section.clone())
            .or_default()
            .insert(key, value.trim().to_string());
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_keys_comments_and_sub_settings() {
        let text = "# comment\n[default]\naws_access_key_id = A\n; other\n\
                    s3 =\n  endpoint_url = http://nested\n[profile  dev ]\nRegion=eu-west-1\n";
        let sections = parse_ini(text);
        assert_eq!(sections["default"]["aws_access_key_id"], "A");
        assert_eq!(sections["default"]["s3"], "");
        assert!(!sections["default"].contains_key("endpoint_url"));
        assert_eq!(sections["default"]["s3.endpoint_url"], "http://nested");
        assert_eq!(sections["profile dev"]["region"], "eu-west-1");
    }

    #[test]
    fn debug_names_keys_never_values() {
        let dir = std::env::temp_dir().join(format!("bucket-lease-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIDVISIBLE\naws_secret_access_key = SecretValue42\n\
             aws_session_token = TokenValue42\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let none = dir.join("none").display().to_string();
        let env = move |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(path.clone()),
            "AWS_CONFIG_FILE" => Some(none.clone()),
            _ => None,
        };
        let profile = Profile::load(&env).unwrap();
        assert_eq!(profile.get("aws_secret_access_key"), Some("SecretValue42"));
        let shown = format!("{profile:?}");
        assert!(shown.contains("aws_secret_access_key"), "{shown}");
        for secret in ["SecretValue42", "TokenValue42", "AKIDVISIBLE"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
