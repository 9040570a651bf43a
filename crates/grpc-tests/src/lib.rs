//! End-to-end gRPC tests for Rampart, kept in their own crate so that tonic's dependency tree is
//! built only for these tests. The library is empty: the harness (rampart process, echo service,
//! certificates) lives in `tests/common/`, and the tests in `tests/`.
#![forbid(unsafe_code)]
