import type { Config } from '../config/schema.js'
import type { LlmTrace, TaskAttributes, TaskTrace, ToolTrace, TurnTrace } from './spans.js'

export type { LlmTrace, TaskAttributes, TaskTrace, ToolTrace, TurnTrace } from './spans.js'

/** Off (the default): every span a no-op, and the OpenTelemetry modules never loaded. */
const NOOP_LLM: LlmTrace = { end: () => undefined, fail: () => undefined }
const NOOP_TOOL: ToolTrace = { end: () => undefined }
export const NOOP_TURN: TurnTrace = { llm: () => NOOP_LLM, tool: () => NOOP_TOOL, end: () => undefined }
export const NO_TRACE: TaskTrace = { turn: () => NOOP_TURN, end: async () => undefined }

/** Where traces go: telemetry.otlp_endpoint, else OTEL_EXPORTER_OTLP_ENDPOINT (or its traces-only variant), else null (off). */
export function traceEndpoint(config: Config, env: NodeJS.ProcessEnv): string | null {
  const configured = config.telemetry.otlp_endpoint
  if (configured !== null) return `${configured.replace(/\/+$/, '')}/v1/traces`
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  if (traces) return traces
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT
  return base ? `${base.replace(/\/+$/, '')}/v1/traces` : null
}

/** The task's trace: OpenTelemetry's, loaded only now, when an endpoint is configured; else the no-ops. */
export async function startTaskTrace(config: Config, env: NodeJS.ProcessEnv, task: TaskAttributes): Promise<TaskTrace> {
  const endpoint = traceEndpoint(config, env)
  if (endpoint === null) return NO_TRACE
  const { otelTaskTrace } = await import('./otel.js')
  return otelTaskTrace(
    {
      endpoint,
      serviceName: config.telemetry.service_name,
      content: config.telemetry.content,
      traceparent: env.TRACEPARENT ?? null,
      headers: config.telemetry.headers,
    },
    task,
  )
}
