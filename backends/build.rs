//! Sets the cfg `http` when any signed-HTTP store is built (the features
//! `s3`, `r2`, `minio`): the shared client and its configuration compile
//! under that one name, and no feature of its own (which users could turn
//! on without a service) is needed.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(http)");
    let http = ["S3", "R2", "MINIO"]
        .iter()
        .any(|f| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some());
    if http {
        println!("cargo::rustc-cfg=http");
    }
}
