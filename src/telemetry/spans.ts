/**
 * The agent loop's spans (docs/contract.md §15): a task, its turns, each LLM call and tool call. The
 * loop calls these methods whether or not traces are on; off (the default), they are
 * no-ops and the OpenTelemetry modules are never loaded (start-up time).
 */
/**
 * Without telemetry.content a span carries no text of the task's: no statement, message,
 * tool argument or result, and no error text (an LLM server's error, a tool's, may quote
 * them): errors are named by their kind. With it, text is masked (docs/serve.md#traces).
 */
export interface TaskTrace {
  turn(n: number): TurnTrace
  /** Ends the task's span with what became of the task; then flushes the exporter. */
  end(status: string, error?: string | null): Promise<void>
}

export interface TurnTrace {
  llm(request: { model: string; messages: unknown }): LlmTrace
  /** `label`: the name as a bounded label (a built-in, mcp:<server>, other), what a span without content carries: the name and the call id are the model's text. */
  tool(name: string, callId: string, args: unknown, label: string): ToolTrace
  end(): void
}

export interface LlmTrace {
  end(reply: {
    model?: string
    inputTokens: number | null
    outputTokens: number | null
    cachedTokens: number | null
    finishReason: string
    output: unknown
  }): void
  fail(error: unknown): void
}

export interface ToolTrace {
  end(status: 'success' | 'error', error: string | null, output: string): void
}

export interface TaskAttributes {
  uuid: string
  user: string | null
  host: string
  resumed: boolean
}
