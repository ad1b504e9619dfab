//! A real tasks-capable upstream: an rmcp 3.11 server (its own
//! `TaskManager` and streamable-HTTP tower service, served by hyper on a
//! loopback port) declaring the tasks extension (`io.modelcontextprotocol/tasks`).
//!
//! Tools: `slow {ms}` — for a request declaring the extension, a task
//! (`CreateTaskResult`) that finishes after `ms` milliseconds with the text
//! `slept {ms}` (cooperatively cancelled by `tasks/cancel`); for any other,
//! the same work answered directly. `must {ms}` — the same task, but
//! required: a request not declaring the extension gets `-32021` naming it.
//! `quick` answers at once. Counters of what it saw are in [`Seen`].

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the upstream saw.
#[derive(Default)]
pub struct Seen {
    /// Tasks created (`CreateTaskResult` answered).
    pub created: AtomicUsize,
    /// `tasks/get` requests.
    pub gets: AtomicUsize,
    /// `tasks/cancel` requests.
    pub cancels: AtomicUsize,
    /// Calls of `must` refused with `-32021` (the extension not declared).
    pub required: AtomicUsize,
    /// The upstream's own task ids, in creation order.
    pub ids: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Handler {
    tasks: Arc<TaskManager>,
    seen: Arc<Seen>,
}

fn schema() -> serde_json::Map<String, serde_json::Value> {
    serde_json::Map::from_iter([("type".to_owned(), "object".into())])
}

fn ms_of(request: &CallToolRequestParams) -> u64 {
    (request.arguments.as_ref())
        .and_then(|a| a.get("ms"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(100)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "slow",
                "Sleeps {ms} milliseconds, as a task when it may.",
                schema(),
            ),
            Tool::new(
                "must",
                "Sleeps {ms} milliseconds, always as a task.",
                schema(),
            ),
            Tool::new("quick", "Answers at once.", schema()),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ms = ms_of(&request);
        let text = format!("slept {ms}");
        match request.name.as_ref() {
            "quick" => Ok(CallToolResult::success(vec![ContentBlock::text("quick")]).into()),
            name @ ("slow" | "must") => {
                let declared = context
                    .client_capabilities()
                    .is_some_and(|c| c.supports_tasks());
                if !declared && name == "must" {
                    self.seen.required.fetch_add(1, Relaxed);
                    let data = serde_json::json!({"requiredCapabilities":
                        {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
                    let code = rmcp::model::ErrorCode(-32021);
                    return Err(ErrorData::new(code, "this tool runs as a task", Some(data)));
                }
                if !declared {
                    tokio::time::sleep(Duration::from_millis(ms)).await; // not ordering: a slow tool
                    return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
                }
                let options = TaskOptions::new()
                    .with_ttl_ms(60_000)
                    .with_poll_interval_ms(50);
                let task = self.tasks.spawn(options, move |ctx| {
                    Box::pin(async move {
                        tokio::select! {
                            // not ordering: a slow task (the test's premise)
                            _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                                Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
                            }
                            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                        }
                    })
                });
                self.seen.created.fetch_add(1, Relaxed);
                self.seen.ids.lock().unwrap().push(task.task_id.clone());
                Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
            }
            _ => Err(ErrorData::invalid_params("no such tool", None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.seen.gets.fetch_add(1, Relaxed);
        self.tasks
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.seen.cancels.fetch_add(1, Relaxed);
        self.tasks.cancel_task(&request.task_id)
    }
}

/// Starts the rmcp tasks server on a loopback port; returns what it sees
/// and its URL.
pub async fn rmcp_tasks() -> (Arc<Seen>, String) {
    let seen = Arc::new(Seen::default());
    let handler = Handler {
        tasks: Arc::new(TaskManager::new()),
        seen: seen.clone(),
    };
    let svc = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let svc = svc.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |r| {
                    let svc = svc.clone();
                    async move { Ok::<_, std::convert::Infallible>(svc.handle(r).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (seen, url)
}
