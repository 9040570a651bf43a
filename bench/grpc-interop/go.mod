// grpc-interop: grpc-go's interop server (google.golang.org/grpc/interop/server, the server of the
// gRPC interop suite), the second gRPC backend of bench/h2.py (grpc-unary-h2c-interop), and the
// suite's client (google.golang.org/grpc/interop/client), which the gRPC tests run through
// Rampart against that server (crates/grpc-tests/tests/grpc_interop.rs; scripts/grpc-interop
// builds both). Nothing is written here: bench/run.sh builds the pinned version below into
// bench/out/grpc-interop with
//   go build -o ../out/grpc-interop google.golang.org/grpc/interop/server
// (run in this folder). The server answers grpc.testing.TestService over h2c on -port (all
// addresses); bench/grpc-backend -call interop makes its request body and checks its answer.
// To move to another grpc-go release: go get -tool google.golang.org/grpc/interop/server@vX.Y.Z
module rampart/bench/grpc-interop

go 1.26.0

tool (
	google.golang.org/grpc/interop/client
	google.golang.org/grpc/interop/server
)

require (
	cel.dev/expr v0.25.3 // indirect
	cloud.google.com/go/compute/metadata v0.9.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/envoyproxy/go-control-plane/envoy v1.39.1-0.20260819172001-e6e3fd93e4be // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/go-jose/go-jose/v4 v4.1.4 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/spiffe/go-spiffe/v2 v2.8.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
