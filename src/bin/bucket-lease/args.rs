//! The option tables and what they drive: parsing (with `lexopt`, which
//! only splits the command line), `--help`, the shell completions and the
//! man page ([`crate::generate`]).
//!
//! Each command has one table of [`Opt`]s, keyed by an enum of its own so
//! that the compiler checks that every option in the table is handled.
//! Options every command shares ([`COMMON`]: `-v`, `-q`, `-h`) and those of
//! every command that opens a store ([`STORE`]: the AWS CLI's `--profile`,
//! `--region`, `--endpoint-url`) have tables of their own, handled here.
//! [`Spec`] is a command's documentation: its tables without their keys,
//! from which the help, the completions and the man page are all printed.
//!
//! Every misuse is a usage failure ([`exit::USAGE`](crate::cli::exit)):
//! an unknown option, a missing value, a value given to a flag
//! (`--version=1`), a value that is not UTF-8.

use crate::cli::{ExitRow, Failure, StoreFlags};
use std::ffi::OsString;

/// One option of a table.
#[derive(Debug)]
pub struct Opt<K: 'static> {
    /// What the command matches on.
    pub key: K,
    /// The long name, without `--`.
    pub long: &'static str,
    /// The short letter, if any.
    pub short: Option<char>,
    /// The value's name in help (`N`, `DURATION`), or `None` for a flag.
    pub value: Option<&'static str>,
    /// What the option does, one paragraph (wrapped when printed).
    pub help: &'static str,
}

impl<K> Opt<K> {
    /// An option with a value, `--long VALUE`, and no short letter.
    pub const fn valued(
        key: K,
        long: &'static str,
        value: &'static str,
        help: &'static str,
    ) -> Self {
        Opt {
            key,
            long,
            short: None,
            value: Some(value),
            help,
        }
    }

    /// A flag: `--long`, no short letter, no value.
    pub const fn flag(key: K, long: &'static str, help: &'static str) -> Self {
        Opt {
            key,
            long,
            short: None,
            value: None,
            help,
        }
    }
}

/// An option without its key: what the help, the completions and the man
/// page print.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    /// The long name, without `--`.
    pub long: &'static str,
    /// The short letter, if any.
    pub short: Option<char>,
    /// The value's name, or `None` for a flag.
    pub value: Option<&'static str>,
    /// What the option does.
    pub help: &'static str,
}

impl Doc {
    /// The help up to its first sentence, clause or parenthesis, for
    /// completions.
    pub fn summary(&self) -> &'static str {
        let end = [". ", "; ", " ("]
            .iter()
            .filter_map(|stop| self.help.find(stop))
            .min()
            .unwrap_or(self.help.len());
        self.help[..end].trim_end_matches('.')
    }
}

/// The documentation of one command (or of `bucket-lease` itself).
#[derive(Debug)]
pub struct Spec {
    /// The command's word (`run`), empty for `bucket-lease` itself.
    pub name: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// The usage line(s), without `Usage: `.
    pub usage: &'static str,
    /// Paragraphs before the options.
    pub about: &'static str,
    /// Text after the options (may be empty).
    pub footer: &'static str,
    /// Every option it takes, its own first, then [`STORE`] (for a
    /// command that opens a store) and [`COMMON`].
    pub options: Vec<Doc>,
}

impl Spec {
    /// A spec from a command's own table; `store`: whether it opens a
    /// store (and so takes [`STORE`]).
    pub fn new<K>(
        name: &'static str,
        summary: &'static str,
        usage: &'static str,
        about: &'static str,
        footer: &'static str,
        own: &'static [Opt<K>],
        store: bool,
    ) -> Spec {
        let mut options: Vec<Doc> = docs(own);
        if store {
            options.extend(docs(STORE));
        }
        options.extend(docs(COMMON));
        Spec {
            name,
            summary,
            usage,
            about,
            footer,
            options,
        }
    }
}

fn docs<K>(table: &'static [Opt<K>]) -> Vec<Doc> {
    table
        .iter()
        .map(|o| Doc {
            long: o.long,
            short: o.short,
            value: o.value,
            help: o.help,
        })
        .collect()
}

/// The options every command that opens a store takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKey {
    /// `--profile`.
    Profile,
    /// `--region`.
    Region,
    /// `--endpoint-url`.
    EndpointUrl,
}

/// The AWS CLI's options, on every command that opens a store.
pub const STORE: &[Opt<StoreKey>] = &[
    Opt {
        key: StoreKey::Profile,
        long: "profile",
        short: None,
        value: Some("NAME"),
        help: "the profile of ~/.aws/config and ~/.aws/credentials to use, over AWS_PROFILE; \
               as in the AWS CLI, its credentials win over AWS_ACCESS_KEY_ID",
    },
    Opt {
        key: StoreKey::Region,
        long: "region",
        short: None,
        value: Some("REGION"),
        help: "the region, over AWS_REGION, AWS_DEFAULT_REGION and the profile's",
    },
    Opt {
        key: StoreKey::EndpointUrl,
        long: "endpoint-url",
        short: None,
        value: Some("URL"),
        help: "the S3 endpoint, over AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL and the profile's \
               endpoint_url",
    },
];

/// The options every command shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommonKey {
    /// `-v`.
    Verbose,
    /// `-q`.
    Quiet,
    /// `-h`.
    Help,
}

/// The options every command shares.
pub const COMMON: &[Opt<CommonKey>] = &[
    Opt {
        key: CommonKey::Verbose,
        long: "verbose",
        short: Some('v'),
        value: None,
        help: "say more on stderr (-vv: debug); also BUCKET_LEASE_LOG=LEVEL",
    },
    Opt {
        key: CommonKey::Quiet,
        long: "quiet",
        short: Some('q'),
        value: None,
        help: "only errors on stderr",
    },
    Opt {
        key: CommonKey::Help,
        long: "help",
        short: Some('h'),
        value: None,
        help: "this help",
    },
];

/// What the shared tables set.
#[derive(Debug, Default)]
pub struct Shared {
    /// How many `-v` were given.
    pub verbose: u8,
    /// Whether `-q` was given.
    pub quiet: bool,
    /// `--profile`, `--region`, `--endpoint-url`.
    pub store: StoreFlags,
}

/// One argument a command handles itself.
#[derive(Debug)]
pub enum Arg<K> {
    /// An option of its own table, with its value (for one that takes one).
    Opt(K, Option<String>),
    /// A positional argument.
    Word(OsString),
    /// `-h` or `--help`.
    Help,
}

/// The command line, read through one table at a time.
#[derive(Debug)]
pub struct Args {
    parser: lexopt::Parser,
    /// The command being parsed, for messages (empty at the top).
    pub command: &'static str,
    /// What the shared options set.
    pub shared: Shared,
}

/// Which option of a command's table the token `--long` or `-short` names:
/// its index in the table, and whether it takes a value.
type Lookup<'a> = dyn Fn(Option<&str>, Option<char>) -> Option<(usize, bool)> + 'a;

/// Whether the token `--long` or `-short` names the option `long_name`
/// (`-letter`).
fn matches(long: Option<&str>, short: Option<char>, long_name: &str, letter: Option<char>) -> bool {
    match (long, short) {
        (Some(l), _) => l == long_name,
        (None, c) => c.is_some() && c == letter,
    }
}

/// How a token was written: `--name` or `-c`.
fn spelled(long: Option<&str>, short: Option<char>) -> String {
    match (long, short) {
        (Some(long), _) => format!("--{long}"),
        (None, Some(c)) => format!("-{c}"),
        (None, None) => String::new(),
    }
}

impl Args {
    /// The arguments after the program's name.
    pub fn new(args: impl IntoIterator<Item = OsString>) -> Args {
        Args {
            parser: lexopt::Parser::from_args(args),
            command: "",
            shared: Shared::default(),
        }
    }

    /// Turn on logging at the level asked for.
    pub fn init_logging(&self) {
        crate::log::init(self.shared.verbose, self.shared.quiet);
    }

    /// The next argument through the table `own` (and [`STORE`] when
    /// `store`); the shared options are taken here.
    ///
    /// # Errors
    ///
    /// A usage failure for an option in none of the tables, a missing
    /// value, a value given to a flag, or a value that is not UTF-8.
    pub fn next<K: Copy>(
        &mut self,
        own: &'static [Opt<K>],
        store: bool,
    ) -> Result<Option<Arg<K>>, Failure> {
        // The work is done once for every table (`next_in`), not once per
        // key type: the command is smaller by the copies it does not have.
        let find = |long: Option<&str>, short: Option<char>| {
            let i = own
                .iter()
                .position(|o| matches(long, short, o.long, o.short))?;
            Some((i, own[i].value.is_some()))
        };
        Ok(match self.next_in(&find, store)? {
            None => None,
            Some(Arg::Opt(i, value)) => Some(Arg::Opt(own[i].key, value)),
            Some(Arg::Word(word)) => Some(Arg::Word(word)),
            Some(Arg::Help) => Some(Arg::Help),
        })
    }

    /// [`next`](Self::next) with the command's table as `own`: the index
    /// of the option a token names, and whether it takes a value.
    fn next_in(&mut self, own: &Lookup<'_>, store: bool) -> Result<Option<Arg<usize>>, Failure> {
        loop {
            let (long, short) = match self.parser.next() {
                Ok(None) => return Ok(None),
                Ok(Some(lexopt::Arg::Value(word))) => return Ok(Some(Arg::Word(word))),
                Ok(Some(lexopt::Arg::Long(name))) => (Some(name.to_string()), None),
                Ok(Some(lexopt::Arg::Short(c))) => (None, Some(c)),
                Err(e) => return Err(self.failure(e)),
            };
            let name = spelled(long.as_deref(), short);
            let matches = |long_name: &str, letter: Option<char>| {
                matches(long.as_deref(), short, long_name, letter)
            };
            if let Some((i, takes_value)) = own(long.as_deref(), short) {
                let value = self.value_of(&name, long.is_some(), takes_value)?;
                return Ok(Some(Arg::Opt(i, value)));
            }
            if let Some(opt) = STORE.iter().find(|o| store && matches(o.long, o.short)) {
                let value = self
                    .value_of(&name, long.is_some(), true)?
                    .unwrap_or_default();
                if value.is_empty() {
                    return Err(Failure::usage(
                        self.command,
                        format!("{name}: the value is empty"),
                    ));
                }
                let flags = &mut self.shared.store;
                match opt.key {
                    StoreKey::Profile => flags.profile = Some(value),
                    StoreKey::Region => flags.region = Some(value),
                    StoreKey::EndpointUrl => flags.endpoint_url = Some(value),
                }
                continue;
            }
            if let Some(opt) = COMMON.iter().find(|o| matches(o.long, o.short)) {
                self.value_of(&name, long.is_some(), false)?;
                match opt.key {
                    CommonKey::Verbose => {
                        self.shared.verbose = self.shared.verbose.saturating_add(1)
                    }
                    CommonKey::Quiet => self.shared.quiet = true,
                    CommonKey::Help => return Ok(Some(Arg::Help)),
                }
                continue;
            }
            let hint = if !store && STORE.iter().any(|o| matches(o.long, o.short)) {
                " (it goes after the command: bucket-lease COMMAND --profile NAME URL)"
            } else {
                ""
            };
            return Err(Failure::usage(
                self.command,
                format!("unknown option {name}{hint}"),
            ));
        }
    }

    /// The value of the option `name` just read: for one that takes a
    /// value, its value (`--name=value`, `--name value`, `-xvalue`, `-x
    /// value`); for a flag written long, a failure if `=value` follows.
    fn value_of(
        &mut self,
        name: &str,
        long: bool,
        takes_value: bool,
    ) -> Result<Option<String>, Failure> {
        if !takes_value {
            if long && self.parser.optional_value().is_some() {
                return Err(Failure::usage(
                    self.command,
                    format!("{name} takes no value"),
                ));
            }
            return Ok(None);
        }
        match self.parser.value() {
            Ok(value) => value.into_string().map(Some).map_err(|value| {
                Failure::usage(
                    self.command,
                    format!("{name}: {value:?} is not valid UTF-8"),
                )
            }),
            Err(lexopt::Error::MissingValue { .. }) => Err(Failure::usage(
                self.command,
                format!("{name} needs a value"),
            )),
            Err(e) => Err(self.failure(e)),
        }
    }

    /// Whether the next argument, as given, is `--` (only between
    /// arguments, not inside a cluster of short flags).
    pub fn dashes_next(&mut self) -> bool {
        self.parser
            .try_raw_args()
            .is_some_and(|raw| raw.peek().is_some_and(|a| a == "--"))
    }

    /// Everything not read yet, exactly as given (after COMMAND's first
    /// word: its own arguments, `--` and options included).
    pub fn rest(&mut self) -> Vec<OsString> {
        match self.parser.raw_args() {
            Ok(raw) => raw.collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The usage failure for an error of the tokenizer.
    fn failure(&self, e: lexopt::Error) -> Failure {
        let message = match e {
            lexopt::Error::UnexpectedValue { option, .. } => {
                format!("{option} takes no value")
            }
            lexopt::Error::MissingValue {
                option: Some(option),
            } => format!("{option} needs a value"),
            lexopt::Error::UnexpectedOption(option) => format!("unknown option {option}"),
            lexopt::Error::UnexpectedArgument(word) => format!("unexpected argument {word:?}"),
            lexopt::Error::NonUnicodeValue(word) => format!("{word:?} is not valid UTF-8"),
            other => other.to_string(),
        };
        Failure::usage(self.command, message)
    }

    /// The usage failure for a positional argument the command does not
    /// take.
    pub fn unexpected(&self, word: &OsString) -> Failure {
        Failure::usage(self.command, format!("unexpected argument {word:?}"))
    }
}

/// The URL argument, once: a usage failure for a second one.
///
/// # Errors
///
/// As said.
pub fn set_url(
    command: &'static str,
    url: &mut Option<String>,
    word: OsString,
) -> Result<(), Failure> {
    if let Some(first) = url {
        return Err(Failure::usage(
            command,
            format!("unexpected argument {word:?} (the URL is already {first:?})"),
        ));
    }
    match word.into_string() {
        Ok(s) => {
            *url = Some(s);
            Ok(())
        }
        Err(word) => Err(Failure::usage(
            command,
            format!("URL {word:?} is not valid UTF-8"),
        )),
    }
}

/// The URL, or a usage failure saying it is missing.
///
/// # Errors
///
/// As said.
pub fn require_url(command: &'static str, url: Option<String>) -> Result<String, Failure> {
    url.ok_or_else(|| Failure::usage(command, "missing URL (such as s3://bucket/prefix)"))
}

/// The value of an option that takes one (the parser always gives it).
pub fn given(value: Option<String>) -> String {
    value.unwrap_or_default()
}

// ------------------------------------------------------------------ help

/// Where an option's help starts.
const HELP_COLUMN: usize = 26;
/// How wide help lines are.
const WIDTH: usize = 80;

/// How an option is written in help: `-E, --conflict-exit-code N`.
pub fn flag_text(doc: &Doc) -> String {
    let long = match doc.value {
        Some(value) => format!("--{} {value}", doc.long),
        None => format!("--{}", doc.long),
    };
    match doc.short {
        Some(c) => format!("-{c}, {long}"),
        None => format!("    {long}"),
    }
}

/// `text` in lines of at most `width` characters.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `label`, then `text` wrapped within [`WIDTH`] from `column` on: beside
/// the label when it leaves two spaces before the column, else on the
/// lines below it. Each line ends in a newline.
fn hanging(label: &str, text: &str, column: usize) -> String {
    let mut out = String::new();
    let lines = wrap(text, WIDTH - column);
    let mut lines = lines.iter();
    if label.len() + 2 <= column {
        let first = lines.next().map_or("", String::as_str);
        out.push_str(&format!("{label:<column$}{first}\n"));
    } else {
        out.push_str(&format!("{label}\n"));
    }
    for line in lines {
        out.push_str(&format!("{:column$}{line}\n", ""));
    }
    out
}

/// The options of `spec` as help lines.
pub fn options_text(spec: &Spec) -> String {
    spec.options
        .iter()
        .map(|doc| hanging(&format!("  {}", flag_text(doc)), doc.help, HELP_COLUMN))
        .collect()
}

/// Where an exit code's meaning starts.
const EXIT_MEANING_COLUMN: usize = 11;

/// The exit code table as help prints it, after `Exit codes:`: each
/// row's codes, then its meaning wrapped within [`WIDTH`] (codes too wide
/// for their column on a line of their own, as an option's flag).
pub fn exit_codes_text(rows: &[ExitRow]) -> String {
    let mut out = String::from("Exit codes:\n");
    for row in rows {
        let codes = format!("  {}", row.label("/"));
        out.push_str(&hanging(&codes, row.meaning, EXIT_MEANING_COLUMN));
    }
    out.trim_end().to_string()
}

/// Print the help of `spec`, the URL and exit code tables after it; exit 0.
pub fn print_help(spec: &Spec) -> u8 {
    println!(
        "{}",
        help_text(spec, crate::cli::URL_HELP, crate::cli::EXIT_CODES)
    );
    crate::cli::exit::OK
}

/// The whole `--help` of `spec`, the URL and exit code tables after it.
pub fn help_text(spec: &Spec, url_help: &str, exit_codes: &[ExitRow]) -> String {
    let title = if spec.name.is_empty() {
        format!("bucket-lease: {}", spec.summary)
    } else {
        format!("bucket-lease {}: {}", spec.name, spec.summary)
    };
    let mut out = format!("{title}\n\nUsage: {}\n", spec.usage);
    if !spec.about.is_empty() {
        out.push_str(&format!("\n{}\n", spec.about.trim_end()));
    }
    out.push_str(&format!("\nOptions:\n{}", options_text(spec)));
    if !spec.footer.is_empty() {
        out.push_str(&format!("\n{}\n", spec.footer.trim_end()));
    }
    out.push_str(&format!("\n{url_help}\n\n{}", exit_codes_text(exit_codes)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum K {
        Ttl,
        Json,
        Code,
    }

    const TABLE: &[Opt<K>] = &[
        Opt {
            key: K::Ttl,
            long: "ttl",
            short: None,
            value: Some("S"),
            help: "t",
        },
        Opt {
            key: K::Json,
            long: "json",
            short: None,
            value: None,
            help: "j",
        },
        Opt {
            key: K::Code,
            long: "code",
            short: Some('E'),
            value: Some("N"),
            help: "c",
        },
    ];

    fn all(args: &[&str]) -> Result<Vec<String>, Failure> {
        let mut a = Args::new(args.iter().map(OsString::from));
        a.command = "t";
        let mut out = Vec::new();
        while let Some(arg) = a.next(TABLE, true)? {
            out.push(format!("{arg:?}"));
        }
        out.push(format!(
            "v={} q={} {:?}",
            a.shared.verbose, a.shared.quiet, a.shared.store
        ));
        Ok(out)
    }

    #[test]
    fn values_in_every_spelling_and_shared_flags_bundled() {
        let got = all(&[
            "--ttl=5", "--ttl", "6", "-E7", "-E", "8", "-vvq", "--json", "w",
        ])
        .unwrap();
        assert_eq!(got[0], "Opt(Ttl, Some(\"5\"))");
        assert_eq!(got[1], "Opt(Ttl, Some(\"6\"))");
        assert_eq!(got[2], "Opt(Code, Some(\"7\"))");
        assert_eq!(got[3], "Opt(Code, Some(\"8\"))");
        assert_eq!(got[4], "Opt(Json, None)");
        assert_eq!(got[5], "Word(\"w\")");
        assert!(got[6].starts_with("v=2 q=true"), "{got:?}");
        let got = all(&["--region", "r", "--endpoint-url=http://e", "--profile", "p"]).unwrap();
        assert!(
            got[0].contains("Some(\"p\")") && got[0].contains("http://e"),
            "{got:?}"
        );
    }

    #[test]
    fn every_misuse_is_a_usage_failure() {
        for (args, needle) in [
            (&["--bogus"][..], "unknown option --bogus"),
            (&["-x"], "unknown option -x"),
            (&["--ttl"], "--ttl needs a value"),
            (&["-E"], "-E needs a value"),
            (&["--json=1"], "--json takes no value"),
            (&["--verbose=2"], "--verbose takes no value"),
            (&["--region="], "--region: the value is empty"),
        ] {
            let e = all(args).expect_err(needle);
            assert_eq!(e.code, crate::cli::exit::USAGE);
            assert!(e.message.contains(needle), "{args:?}: {}", e.message);
        }
    }

    #[test]
    fn help_wraps_under_its_column() {
        let spec = Spec::new("x", "s", "u", "", "", TABLE, true);
        let text = options_text(&spec);
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        assert!(text.contains("-E, --code N"), "{text}");
        assert!(text.contains("--endpoint-url URL"), "{text}");
    }
}
