import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import type { Attributes, Context, Span } from '@opentelemetry/api'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions'
import { maskText, maskValue } from '../storage/format/mask.js'
import { ATTR, SPANS } from './names.js'
import type { LlmTrace, TaskAttributes, TaskTrace, ToolTrace, TurnTrace } from './spans.js'
import { ctxagentVersion } from '../version.js'

export interface OtelSettings {
  endpoint: string
  serviceName: string
  /** Message content on LLM and tool spans (masked); off: sizes and counts only. */
  content: boolean
  /** A W3C traceparent to continue (a worker's, or a CI job's): the task span becomes its child. */
  traceparent: string | null
  /** telemetry.headers: sent with every export (the receiver's auth). */
  headers: Record<string, string>
}

/** The most of one message content put on a span: spans are not a transcript. */
const MAX_CONTENT = 16_000

/** One span as the loop saw it, handed to the SDK later: its span once started there, and the context its children hang from. */
interface Later {
  span: Span | null
  context: Context
}

/**
 * The task's spans through the official SDK: a BasicTracerProvider of its own (nothing
 * global is registered), a BatchSpanProcessor and the OTLP/HTTP exporter.
 *
 * The loop's calls only note what happened and when (performance.now()); the SDK's work
 * (ids, attributes, the batch, its JSON and export) is replayed from those notes, with the
 * noted times, while the process waits on the LLM, and before the task's span ends. Made
 * as each call came, the SDK's spans cost a turn ~0.3 ms between an answer and the next
 * request, more on a busy machine (BENCHMARKS.md, telemetry-turn).
 */
export function otelTaskTrace(settings: OtelSettings, task: TaskAttributes): TaskTrace {
  const exporter = new OTLPTraceExporter({
    url: settings.endpoint,
    timeoutMillis: 5_000,
    ...(Object.keys(settings.headers).length > 0 ? { headers: settings.headers } : {}),
  })
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: settings.serviceName, [ATTR_SERVICE_VERSION]: ctxagentVersion(), [ATTR.host]: task.host }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  })
  const tracer = provider.getTracer('ctxagent')
  const parent =
    settings.traceparent === null
      ? context.active()
      : propagation.extract(
          context.active(),
          { traceparent: settings.traceparent },
          { get: (c, k) => (c as Record<string, string>)[k], keys: (c) => Object.keys(c as object) },
        )
  const base: Attributes = { [ATTR.taskUuid]: task.uuid, ...(task.user === null ? {} : { [ATTR.taskUser]: task.user }) }
  const taskSpan = tracer.startSpan(SPANS.task, { kind: SpanKind.INTERNAL, attributes: { ...base, 'ctxagent.task.resumed': task.resumed } }, parent)
  const taskLater: Later = { span: taskSpan, context: trace.setSpan(parent, taskSpan) }
  // Content is taken when the loop hands it over (the messages may change afterwards): only with telemetry.content.
  const content = settings.content
    ? (value: unknown): string => {
        const text = typeof value === 'string' ? maskText(value) : JSON.stringify(maskValue(value))
        return text.length > MAX_CONTENT ? `${text.slice(0, MAX_CONTENT)}…` : text
      }
    : null
  const notes = new Replay()
  /** A span of `of`'s, started now: the SDK hears of it, and its attributes are made, when the notes run. */
  const start = (of: Later, name: string, kind: SpanKind, attributes: () => Attributes): Later => {
    const at = performance.now()
    const later: Later = { span: null, context: of.context }
    notes.add(() => {
      later.span = tracer.startSpan(name, { kind, attributes: attributes(), startTime: at }, of.context)
      later.context = trace.setSpan(of.context, later.span)
    })
    return later
  }

  const turn = (n: number): TurnTrace => {
    const turnLater = start(taskLater, SPANS.turn, SpanKind.INTERNAL, () => ({ ...base, [ATTR.turn]: n }))
    return {
      llm: ({ model, messages }) => {
        const input = content ? content(messages) : null
        const later = start(turnLater, SPANS.llm(model), SpanKind.CLIENT, () => ({
          ...base,
          [ATTR.operation]: 'chat',
          [ATTR.requestModel]: model,
          ...(input === null ? {} : { [ATTR.input]: input }),
        }))
        notes.waiting()
        return llmSpan(notes, later, content)
      },
      tool: (name, callId, args, label) => {
        const input = content ? content(args) : null
        // The name and the call id are the model's text: without content, the bounded label alone.
        const shown = content ? content(name) : label
        const later = start(turnLater, SPANS.tool(shown), SpanKind.INTERNAL, () => ({
          ...base,
          [ATTR.operation]: 'execute_tool',
          [ATTR.toolName]: shown,
          ...(input === null ? {} : { [ATTR.toolCallId]: content?.(callId) ?? '', 'gen_ai.tool.call.arguments': input }),
        }))
        return toolSpan(notes, later, content)
      },
      end: () => {
        const at = performance.now()
        notes.add(() => turnLater.span?.end(at))
      },
    }
  }
  return {
    turn,
    end: async (status, error) => {
      notes.run()
      taskSpan.setAttribute(ATTR.taskStatus, status)
      // The task's error may quote its statement (an LLM server's error does): its text only with content.
      if (error) taskSpan.setStatus({ code: SpanStatusCode.ERROR, ...(content ? { message: maskText(error) } : {}) })
      taskSpan.end()
      // Flushed on every ending (completed, failed, paused, lost): the process may exit right after.
      await provider.shutdown().catch(() => undefined)
    },
  }
}

/**
 * How long the LLM must have kept the process waiting before the notes run: a model takes
 * longer, so they run in every wait. A server that answers sooner (a local one, a cache)
 * leaves them to a later wait: run then, they would hold back its answer's handling and
 * the next request.
 */
const IDLE_MS = 100
/** Notes run at a time in a wait: an answer that comes meanwhile waits for no more than these. */
const SLICE = 16
/** Notes kept at most (about 150 turns of a quick server): past it they all run in the next wait, however short. */
const MAX_NOTES = 1_000

/** Notes of what the loop did, run in order while the process waits on the LLM, or at once (run). */
class Replay {
  private notes: (() => void)[] = []
  private timer: NodeJS.Timeout | undefined
  private immediate: NodeJS.Immediate | undefined

  add(note: () => void): void {
    this.notes.push(note)
  }

  /**
   * The LLM's request is going out: once the wait has lasted IDLE_MS the notes run, a
   * slice at a time, each after the event loop's poll for I/O (an answer that came is
   * taken first, and answered() keeps the rest for the next wait).
   */
  waiting(): void {
    this.cancel()
    const all = this.notes.length >= MAX_NOTES
    this.timer = setTimeout(() => (this.immediate = setImmediate(all ? this.run : this.slice).unref()), all ? 0 : IDLE_MS).unref()
  }

  /** The LLM answered: the notes not run yet wait for the next wait, unless they are too many to keep. */
  answered(): void {
    if (this.notes.length < MAX_NOTES) this.cancel()
  }

  /** All the notes, now. */
  readonly run = (): void => {
    this.cancel()
    const notes = this.notes
    this.notes = []
    for (const note of notes) note()
  }

  private readonly slice = (): void => {
    for (const note of this.notes.splice(0, SLICE)) note()
    if (this.notes.length > 0) this.immediate = setImmediate(this.slice).unref()
  }

  private cancel(): void {
    clearTimeout(this.timer)
    clearImmediate(this.immediate)
  }
}

function llmSpan(notes: Replay, later: Later, content: ((value: unknown) => string) | null): LlmTrace {
  return {
    end: ({ model, inputTokens, outputTokens, cachedTokens, finishReason, output }) => {
      const at = performance.now()
      const text = content === null ? null : content(output)
      notes.add(() => {
        later.span
          ?.setAttributes({
            ...(model ? { [ATTR.responseModel]: model } : {}),
            ...(inputTokens === null ? {} : { [ATTR.inputTokens]: inputTokens }),
            ...(outputTokens === null ? {} : { [ATTR.outputTokens]: outputTokens }),
            ...(cachedTokens === null ? {} : { [ATTR.cachedTokens]: cachedTokens }),
            [ATTR.finishReasons]: [finishReason],
            ...(text === null ? {} : { [ATTR.output]: text }),
          })
          .end(at)
      })
      notes.answered()
    },
    fail: (error) => {
      const at = performance.now()
      // What kind of failure (the class, and the LLM failure's kind where it has one), never the server's words without content.
      const kind = errorKind(error)
      const message = content === null ? null : content((error as Error)?.message ?? String(error))
      notes.add(() =>
        later.span
          ?.setAttribute(ATTR.errorType, kind)
          .setStatus({ code: SpanStatusCode.ERROR, ...(message === null ? {} : { message }) })
          .end(at),
      )
      notes.answered()
    },
  }
}

/** An error's kind, free of its text: its class name, and `failure` (rate_limited, timeout…) where it has one. */
function errorKind(error: unknown): string {
  const name = error instanceof Error ? error.name : 'Error'
  const failure = (error as { failure?: unknown } | null)?.failure
  return typeof failure === 'string' && /^[a-z_]{1,32}$/.test(failure) ? `${name}:${failure}` : name
}

function toolSpan(notes: Replay, later: Later, content: ((value: unknown) => string) | null): ToolTrace {
  return {
    end: (status, error, output) => {
      const at = performance.now()
      const result = content === null ? null : content(output)
      notes.add(() => {
        const span = later.span
        if (span === null) return
        span.setAttribute(ATTR.toolStatus, status)
        if (result !== null) span.setAttribute('gen_ai.tool.call.result', result)
        if (status === 'error') span.setStatus({ code: SpanStatusCode.ERROR, ...(content === null ? {} : { message: content(error ?? 'error') }) })
        span.end(at)
      })
    },
  }
}
