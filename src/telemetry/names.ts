/**
 * Every metric and span name, once (docs/contract.md §15): /metrics exports the metrics (derived from
 * the index at scrape time), the agent loop and workers open the spans. Metric names all
 * start with `ctxagent_`; span attributes follow OpenTelemetry's GenAI conventions.
 */
export const METRICS = {
  tasks: 'ctxagent_tasks',
  tokens: 'ctxagent_tokens_total',
  cost: 'ctxagent_cost_usd_total',
  /** The pull/merge requests ctxagent opened, by outcome (docs/contract.md §17). */
  pullRequests: 'ctxagent_pull_requests_total',
  /** USD spent on them (every task on each, at config pricing), by outcome. */
  pullRequestUsd: 'ctxagent_pull_request_usd_total',
  compactions: 'ctxagent_compactions_total',
  llmCalls: 'ctxagent_llm_calls_total',
  turns: 'ctxagent_turns_total',
  toolCalls: 'ctxagent_tool_calls_total',
  toolCallsByTool: 'ctxagent_tool_calls_by_tool_total',
  deliveries: 'ctxagent_deliveries_total',
  /** Tasks' environment cache results (docs/environments.md#what-is-counted), and the setups' times. */
  envCache: 'ctxagent_env_cache_total',
  envSetup: 'ctxagent_env_setup_seconds',
  messages: 'ctxagent_messages_total',
  taskDuration: 'ctxagent_task_duration_seconds',
  locksStale: 'ctxagent_locks_stale',
  locksReaped: 'ctxagent_locks_reaped_total',
  disk: 'ctxagent_disk_bytes',
  alert: 'ctxagent_alert',
  alertStatus: 'ctxagent_alert_status',
  jobs: 'ctxagent_jobs',
  jobOutcomes: 'ctxagent_jobs_finished_total',
  queueWait: 'ctxagent_queue_wait_seconds',
  oldestWaiting: 'ctxagent_queue_oldest_waiting_seconds',
  workers: 'ctxagent_workers',
  claims: 'ctxagent_job_claims_total',
  /** Attempts after which a job ran again (an outage retried, a usage limit or budget waited out, a death recovered), by reason. */
  jobRetries: 'ctxagent_job_retries_total',
  /** Attempts of fleet jobs that ended in a budget pause, by cap. */
  budgetPauses: 'ctxagent_budget_pauses_total',
  scrapeErrors: 'ctxagent_scrape_errors',
  followers: 'ctxagent_serve_followers',
  followWatchers: 'ctxagent_serve_follow_watchers',
  followersRefused: 'ctxagent_serve_followers_refused_total',
  buildInfo: 'ctxagent_build_info',
} as const

export const SPANS = {
  task: 'ctxagent.task',
  turn: 'ctxagent.turn',
  /** GenAI convention: `{gen_ai.operation.name} {gen_ai.request.model}`, e.g. `chat gpt-4o`. */
  llm: (model: string) => `chat ${model}`,
  tool: (name: string) => `execute_tool ${name}`,
} as const

/** Span attributes: GenAI semantic conventions where one exists, `ctxagent.*` for the rest. */
export const ATTR = {
  taskUuid: 'ctxagent.task.uuid',
  taskUser: 'ctxagent.task.user',
  taskStatus: 'ctxagent.task.status',
  turn: 'ctxagent.turn',
  host: 'host.name',
  operation: 'gen_ai.operation.name',
  system: 'gen_ai.system',
  requestModel: 'gen_ai.request.model',
  responseModel: 'gen_ai.response.model',
  maxTokens: 'gen_ai.request.max_tokens',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  cachedTokens: 'gen_ai.usage.cache_read.input_tokens',
  finishReasons: 'gen_ai.response.finish_reasons',
  toolName: 'gen_ai.tool.name',
  toolCallId: 'gen_ai.tool.call.id',
  toolStatus: 'ctxagent.tool.status',
  input: 'gen_ai.input.messages',
  output: 'gen_ai.output.messages',
  errorType: 'error.type',
} as const
