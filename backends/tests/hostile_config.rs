//! Hostile configuration, generated: URLs and environment values that are
//! malformed, carry user information with a secret in it, or hold odd
//! characters. Parsing and opening them never panics, and no error or
//! `Debug` output ever shows the secret. Stores are only built, never
//! contacted; credentials come from the environment, so no other source is
//! asked.
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

use bucket_lease_backends::config::{open_with_env, StoreUrl};
use proptest::prelude::*;

/// The secret planted in user information; it must never be shown.
const SECRET: &str = "PlantedSecret0x5eCr3t";

fn scheme() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("s3"),
        Just("r2"),
        Just("minio"),
        Just("file"),
        Just("http"),
        Just("S3"),
        Just(""),
    ]
}

fn userinfo() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(format!("AKID:{SECRET}@")),
        Just(format!("{SECRET}@")),
        Just(format!("a:b/{SECRET}@x@")),
        Just(format!(":{SECRET}%40@")),
    ]
}

fn part() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.-]{0,70}",
        ".{0,40}",
        Just("%3F%23%40".to_string()),
        Just("?query#frag".to_string()),
        Just("..//../".to_string()),
        Just("\u{1b}[2J\u{0}".to_string()),
    ]
}

fn endpoint() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(
        (
            prop_oneof![Just("http"), Just("https"), Just("ftp"), Just("")],
            userinfo(),
            part(),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(scheme, user, host, port)| match port {
                Some(port) => format!("{scheme}://{user}{host}:{port}"),
                None => format!("{scheme}://{user}{host}"),
            }),
    )
}

fn assert_hidden(text: &str) -> Result<(), TestCaseError> {
    prop_assert!(!text.contains(SECRET), "the secret is shown: {text}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_url_or_environment_panics_or_shows_a_secret(
        scheme in scheme(),
        user in userinfo(),
        bucket in part(),
        prefix in part(),
        endpoint in endpoint(),
        region in proptest::option::of(part()),
        account in proptest::option::of(part()),
    ) {
        let url = format!("{scheme}://{user}{bucket}/{prefix}");
        match StoreUrl::parse(&url) {
            Ok(parsed) => assert_hidden(&format!("{parsed:?}"))?,
            Err(e) => {
                assert_hidden(&e.to_string())?;
                assert_hidden(&format!("{e:?}"))?;
            }
        }
        if !matches!(scheme, "s3" | "r2" | "minio") {
            // Parsing file:// is enough: opening one only looks for the
            // directory.
            return Ok(());
        }
        let env = |name: &str| -> Option<String> {
            match name {
                "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".into()),
                "AWS_SECRET_ACCESS_KEY" => Some(SECRET.into()),
                "AWS_SESSION_TOKEN" => Some(format!("token-{SECRET}")),
                "AWS_EC2_METADATA_DISABLED" => Some("true".into()),
                "AWS_CONFIG_FILE" | "AWS_SHARED_CREDENTIALS_FILE" => {
                    Some("/nonexistent/bucket-lease-test".into())
                }
                "AWS_ENDPOINT_URL" => endpoint.clone(),
                "AWS_REGION" => region.clone(),
                "R2_ACCOUNT_ID" => account.clone(),
                _ => None,
            }
        };
        match open_with_env(&url, env) {
            Ok((store, prefix)) => {
                assert_hidden(&format!("{store:?}"))?;
                assert_hidden(&prefix)?;
            }
            Err(e) => {
                assert_hidden(&e.to_string())?;
                assert_hidden(&format!("{e:?}"))?;
            }
        }
    }
}
