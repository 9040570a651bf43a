// grpc-interop: grpc-go's interop server (google.golang.org/grpc/interop/server, the server of the
// gRPC interop suite), the second gRPC backend of bench/h2.py (grpc-unary-h2c-interop). Nothing
// is written here: bench/run.sh builds the pinned version below into bench/out/grpc-interop with
//   go build -o ../out/grpc-interop google.golang.org/grpc/interop/server
// (run in this folder). The server answers grpc.testing.TestService over h2c on -port (all
// addresses); bench/grpc-backend -call interop makes its request body and checks its answer.
// To move to another grpc-go release: go get -tool google.golang.org/grpc/interop/server@vX.Y.Z
module rampart/bench/grpc-interop

go 1.26.0

tool google.golang.org/grpc/interop/server

require (
	cloud.google.com/go/compute/metadata v0.9.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
