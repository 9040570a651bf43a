//! The `echo.Echo` gRPC service, written by hand as tonic-build would generate it (no `protoc`):
//! the prost messages, a server that dispatches the four methods through `tonic::server::Grpc`,
//! and a client over `tonic::client::Grpc`.
//!
//! ```proto
//! package echo;
//! service Echo {
//!   rpc UnaryEcho(EchoRequest) returns (EchoResponse);
//!   rpc ServerStreamingEcho(EchoRequest) returns (stream EchoResponse);
//!   rpc ClientStreamingEcho(stream EchoRequest) returns (EchoResponse);
//!   rpc BidiStreamingEcho(stream EchoRequest) returns (stream EchoResponse);
//! }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::client::Grpc as GrpcClient;
use tonic::client::GrpcService;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::http::Uri;
use tonic::codegen::http::{Request as HttpRequest, Response as HttpResponse};
use tonic::codegen::tokio_stream::{self, Stream, StreamExt};
use tonic::codegen::{Body as HttpBody, Bytes, Service, StdError};
use tonic::server::{ClientStreamingService, Grpc, ServerStreamingService, StreamingService, UnaryService};
use tonic::transport::Channel;
use tonic::{Code, IntoRequest, IntoStreamingRequest, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The largest message either side encodes or decodes (the tests send 16 MiB ones).
pub const MAX_MESSAGE: usize = 64 << 20;

/// What every method takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    #[prost(string, tag = "1")]
    pub message: String,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
    /// ServerStreamingEcho: how many replies.
    #[prost(uint32, tag = "3")]
    pub count: u32,
    /// Non-zero: answer with this grpc-status (`message` its grpc-message, a non-empty `payload`
    /// its details) instead.
    #[prost(int32, tag = "4")]
    pub fail_with: i32,
    /// Wait this long before answering (ignoring any deadline the request carries).
    #[prost(uint32, tag = "5")]
    pub sleep_ms: u32,
}

/// What every method answers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoResponse {
    #[prost(string, tag = "1")]
    pub message: String,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

impl EchoRequest {
    pub fn text(message: &str) -> EchoRequest {
        EchoRequest {
            message: message.into(),
            ..Default::default()
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type ReplyStream = Pin<Box<dyn Stream<Item = Result<EchoResponse, Status>> + Send + 'static>>;

// ---------------------------------------------------------------------------------------------
// Server

/// The echo service; clones share the call counter.
#[derive(Clone, Default)]
pub struct EchoService {
    calls: Arc<AtomicUsize>,
}

impl EchoService {
    /// How many calls (of any method, including unknown ones) reached this service.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// A counter shared with this service.
    pub fn counter(&self) -> Arc<AtomicUsize> {
        self.calls.clone()
    }
}

/// `fail_with` as a status, if set: `message` as its grpc-message and a non-empty `payload` as
/// its details (the binary `grpc-status-details-bin` trailer).
fn failure(req: &EchoRequest) -> Result<(), Status> {
    match req.fail_with {
        0 => Ok(()),
        code if req.payload.is_empty() => Err(Status::new(Code::from_i32(code), req.message.clone())),
        code => Err(Status::with_details(
            Code::from_i32(code),
            req.message.clone(),
            Bytes::from(req.payload.clone()),
        )),
    }
}

async fn pause(req: &EchoRequest) {
    if req.sleep_ms > 0 {
        tokio::time::sleep(Duration::from_millis(req.sleep_ms.into())).await;
    }
}

fn reply(req: EchoRequest) -> EchoResponse {
    EchoResponse {
        message: req.message,
        payload: req.payload,
    }
}

struct Unary;
impl UnaryService<EchoRequest> for Unary {
    type Response = EchoResponse;
    type Future = BoxFuture<Result<Response<EchoResponse>, Status>>;
    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        Box::pin(async move {
            let req = request.into_inner();
            pause(&req).await;
            failure(&req)?;
            Ok(Response::new(reply(req)))
        })
    }
}

/// `count` replies, message `"{message} {i}"` (i from 0), each with the payload; then the
/// `fail_with` status if set (so an error can follow data).
struct ServerStreaming;
impl ServerStreamingService<EchoRequest> for ServerStreaming {
    type Response = EchoResponse;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<Result<Response<ReplyStream>, Status>>;
    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        Box::pin(async move {
            let req = request.into_inner();
            pause(&req).await;
            let mut items: Vec<Result<EchoResponse, Status>> = (0..req.count)
                .map(|i| {
                    Ok(EchoResponse {
                        message: format!("{} {i}", req.message),
                        payload: req.payload.clone(),
                    })
                })
                .collect();
            if let Err(status) = failure(&req) {
                items.push(Err(status));
            }
            Ok(Response::new(Box::pin(tokio_stream::iter(items)) as ReplyStream))
        })
    }
}

/// Concatenates the messages and the payloads of the whole stream.
struct ClientStreaming;
impl ClientStreamingService<EchoRequest> for ClientStreaming {
    type Response = EchoResponse;
    type Future = BoxFuture<Result<Response<EchoResponse>, Status>>;
    fn call(&mut self, request: Request<Streaming<EchoRequest>>) -> Self::Future {
        Box::pin(async move {
            let mut inbound = request.into_inner();
            let mut all = EchoResponse::default();
            while let Some(req) = inbound.message().await? {
                pause(&req).await;
                failure(&req)?;
                all.message.push_str(&req.message);
                all.payload.extend_from_slice(&req.payload);
            }
            Ok(Response::new(all))
        })
    }
}

/// One reply per request, as it arrives; a request with `fail_with` ends the call with it.
struct Bidi;
impl StreamingService<EchoRequest> for Bidi {
    type Response = EchoResponse;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<Result<Response<ReplyStream>, Status>>;
    fn call(&mut self, request: Request<Streaming<EchoRequest>>) -> Self::Future {
        Box::pin(async move {
            let inbound = request.into_inner();
            let replies = inbound.then(|item| async move {
                let req = item?;
                pause(&req).await;
                failure(&req)?;
                Ok(reply(req))
            });
            Ok(Response::new(Box::pin(replies) as ReplyStream))
        })
    }
}

impl Service<HttpRequest<Body>> for EchoService {
    type Response = HttpResponse<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<HttpResponse<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: HttpRequest<Body>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<EchoResponse, EchoRequest>::default())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE);
            Ok(match req.uri().path() {
                "/echo.Echo/UnaryEcho" => grpc.unary(Unary, req).await,
                "/echo.Echo/ServerStreamingEcho" => grpc.server_streaming(ServerStreaming, req).await,
                "/echo.Echo/ClientStreamingEcho" => grpc.client_streaming(ClientStreaming, req).await,
                "/echo.Echo/BidiStreamingEcho" => grpc.streaming(Bidi, req).await,
                other => Status::unimplemented(format!("echo backend has no method {other}")).into_http(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Client

/// A client of `echo.Echo` (and of any other path, to call what no backend serves) over any
/// transport `T`: tonic's `Channel`, or a bare HTTP/2 connection (see `backend::connect_bare`).
#[derive(Clone)]
pub struct EchoClient<T = Channel> {
    inner: GrpcClient<T>,
}

impl<T> EchoClient<T>
where
    T: GrpcService<Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: HttpBody<Data = Bytes> + Send + 'static,
    <T::ResponseBody as HttpBody>::Error: Into<StdError> + Send,
{
    /// A client whose requests go to `origin` (scheme and authority) over `transport`.
    pub fn new(transport: T, origin: Uri) -> EchoClient<T> {
        EchoClient {
            inner: GrpcClient::with_origin(transport, origin)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        }
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))
    }

    /// A unary call of `path` (e.g. `/echo.Echo/UnaryEcho`).
    pub async fn unary_at(
        &mut self,
        path: &'static str,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<Response<EchoResponse>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<EchoRequest, EchoResponse>::default();
        self.inner
            .unary(request.into_request(), PathAndQuery::from_static(path), codec)
            .await
    }

    pub async fn unary_echo(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<Response<EchoResponse>, Status> {
        self.unary_at("/echo.Echo/UnaryEcho", request).await
    }

    pub async fn server_streaming_echo(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<Response<Streaming<EchoResponse>>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<EchoRequest, EchoResponse>::default();
        let path = PathAndQuery::from_static("/echo.Echo/ServerStreamingEcho");
        self.inner.server_streaming(request.into_request(), path, codec).await
    }

    pub async fn client_streaming_echo(
        &mut self,
        request: impl IntoStreamingRequest<Message = EchoRequest>,
    ) -> Result<Response<EchoResponse>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<EchoRequest, EchoResponse>::default();
        let path = PathAndQuery::from_static("/echo.Echo/ClientStreamingEcho");
        self.inner
            .client_streaming(request.into_streaming_request(), path, codec)
            .await
    }

    pub async fn bidi_streaming_echo(
        &mut self,
        request: impl IntoStreamingRequest<Message = EchoRequest>,
    ) -> Result<Response<Streaming<EchoResponse>>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<EchoRequest, EchoResponse>::default();
        let path = PathAndQuery::from_static("/echo.Echo/BidiStreamingEcho");
        self.inner
            .streaming(request.into_streaming_request(), path, codec)
            .await
    }
}

/// Collects a response stream, failing on the first error.
pub async fn collect(mut stream: Streaming<EchoResponse>) -> Result<Vec<EchoResponse>, Status> {
    let mut all = Vec::new();
    while let Some(item) = stream.message().await? {
        all.push(item);
    }
    Ok(all)
}
