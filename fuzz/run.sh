#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 120) each under cargo-fuzz (nightly toolchain).
# New inputs go to a scratch corpus; the committed seed corpus (replayed by `cargo test`) is read
# only. A crash leaves its input in fuzz/artifacts/TARGET/ and stops the script with an error.
#   fuzz/run.sh            # 2 minutes per target
#   fuzz/run.sh 600 h1_request
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-120}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(proxy_protocol h1_request h1_response h1_chunked h2_request h2_fields detect resp cache_file trace_context)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  echo "== $t: ${seconds}s"
  cargo +nightly fuzz run "$t" "$scratch" "corpus/$t" -- -max_total_time="$seconds" 2>&1 | grep -E "^(Done|==|SUMMARY|INFO: seed)|crash|panicked" || true
  rm -rf "$scratch"
  if compgen -G "artifacts/$t/crash-*" >/dev/null; then
    echo "$t: crash inputs in fuzz/artifacts/$t/" >&2
    exit 1
  fi
done
