//! The gRPC end-to-end tests in one test binary: each file of this folder is a module of it.

mod common;
mod echo_direct;
mod grpc_calls;
mod grpc_errors;
mod grpc_interop;
mod grpc_tls;

/// With `autotests = false`, a test file not declared above would never be built or run.
#[test]
fn every_test_file_is_declared_here() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(here.join("grpc.rs")).unwrap();
    let missing: Vec<String> = std::fs::read_dir(&here)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".rs").map(str::to_string))
        .filter(|m| m != "grpc" && !root.contains(&format!("\nmod {m};\n")))
        .collect();
    assert!(
        missing.is_empty(),
        "test files not declared in tests/grpc.rs: {missing:?}"
    );
}
