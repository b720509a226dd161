//! Hostile `LEASE` bodies, generated, given to the command: `inspect`,
//! `inspect --json`, `break` and `run` on a `file://` bucket holding them.
//! Each ends with a documented exit code, never a panic; what it prints
//! from the bucket carries no raw control character; and the record is
//! never removed.

#[path = "cli_common/mod.rs"]
mod cli_common;

use cli_common::Target;
use proptest::prelude::*;
use serde_json::{json, Value};

/// A body: not JSON, or a JSON object with odd, extreme or escaping values.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        Just("evil\u{1b}[2J\u{7}\r\u{202e}".to_string()),
        ".{0,24}",
        "[0-9a-f]{32}",
    ];
    let stamp = prop_oneof![
        Just(json!("9999-12-31T23:59:59Z")),
        Just(json!("1970-01-01T00:00:00Z")),
        Just(json!("2026-13-45T99:99:99Z")),
        Just(json!(12)),
        ".{0,16}".prop_map(Value::from),
    ];
    let number = prop_oneof![
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(1u64 << 63)),
        Just(json!(-5)),
        Just(json!("30")),
        any::<u64>().prop_map(Value::from),
    ];
    let name = prop_oneof![
        Just(json!("evil\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}")),
        Just(json!("n".repeat(200))),
        Just(json!(["not", "a", "name"])),
        ".{0,24}".prop_map(Value::from),
        Just(json!("db1:4242")),
    ];
    let record = (text, stamp.clone(), stamp, number.clone(), number);
    let object = (record, proptest::option::of(name)).prop_map(
        |((id, acquired, renewed, ttl, epoch), name)| {
            let mut record = json!({
                "instance_id": id, "acquired_at": acquired, "renewed_at": renewed,
                "ttl_s": ttl, "epoch": epoch,
            });
            if let Some(name) = name {
                record["holder_name"] = name;
            }
            serde_json::to_vec(&record).unwrap()
        },
    );
    prop_oneof![
        3 => object,
        1 => proptest::collection::vec(any::<u8>(), 0..128),
    ]
}

/// Whether `text` holds a control character other than a newline or a tab.
fn raw_control(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_command_has_a_defined_outcome_for_any_record(body in body()) {
        let t = Target::fs("hostile");
        let url = t.url("job");
        t.put_lease(&url, &body);
        for args in [
            vec!["inspect", url.as_str()],
            vec!["inspect", "--json", url.as_str()],
            vec!["break", "--holder", "nobody", url.as_str()],
            vec!["run", "--ttl", "2", url.as_str(), "--", "true"],
        ] {
            let done = t.run(&args);
            let code = done.code.unwrap_or(-1);
            prop_assert!(
                [0, 1, 69, 75, 76].contains(&code),
                "{args:?} exited {code}: {done:?}"
            );
            prop_assert!(!raw_control(&done.stdout), "{args:?} stdout: {:?}", done.stdout);
            prop_assert!(!raw_control(&done.stderr), "{args:?} stderr: {:?}", done.stderr);
            let (store, prefix) = t.store(&url);
            prop_assert!(
                store.get(&bucket_lease::record::lease_key(&prefix), None).is_ok(),
                "{args:?} removed the record"
            );
        }
    }
}
