import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import type { Attributes, Span } from '@opentelemetry/api'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions'
import { maskText, maskValue } from '../storage/format/mask.js'
import { ATTR, SPANS } from './names.js'
import type { LlmTrace, TaskAttributes, TaskTrace, ToolTrace, TurnTrace } from './spans.js'

export interface OtelSettings {
  endpoint: string
  serviceName: string
  /** Message content on LLM and tool spans (masked); off: sizes and counts only. */
  content: boolean
  /** A W3C traceparent to continue (a worker's, or a CI job's): the task span becomes its child. */
  traceparent: string | null
}

/** The most of one message content put on a span: spans are not a transcript. */
const MAX_CONTENT = 16_000

/**
 * The task's spans through the official SDK: a BasicTracerProvider of its own (nothing
 * global is registered), a BatchSpanProcessor and the OTLP/HTTP exporter. Spans are
 * parented explicitly (no context manager), so a turn costs a few object allocations.
 */
export function otelTaskTrace(settings: OtelSettings, task: TaskAttributes): TaskTrace {
  const exporter = new OTLPTraceExporter({ url: settings.endpoint, timeoutMillis: 5_000 })
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: settings.serviceName, [ATTR_SERVICE_VERSION]: process.env.npm_package_version ?? 'ctxagent', [ATTR.host]: task.host }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  })
  const tracer = provider.getTracer('ctxagent')
  const parent = settings.traceparent === null ? context.active() : propagation.extract(context.active(), { traceparent: settings.traceparent }, { get: (c, k) => (c as Record<string, string>)[k], keys: (c) => Object.keys(c as object) })
  const base: Attributes = { [ATTR.taskUuid]: task.uuid, ...(task.user === null ? {} : { [ATTR.taskUser]: task.user }) }
  const taskSpan = tracer.startSpan(SPANS.task, { kind: SpanKind.INTERNAL, attributes: { ...base, 'ctxagent.task.resumed': task.resumed } }, parent)
  const taskContext = trace.setSpan(parent, taskSpan)
  const content = (value: unknown): string => {
    const text = typeof value === 'string' ? maskText(value) : JSON.stringify(maskValue(value))
    return text.length > MAX_CONTENT ? `${text.slice(0, MAX_CONTENT)}…` : text
  }

  const turn = (n: number): TurnTrace => {
    const span = tracer.startSpan(SPANS.turn, { attributes: { ...base, [ATTR.turn]: n } }, taskContext)
    const turnContext = trace.setSpan(taskContext, span)
    return {
      llm: (request) => llmSpan(tracer.startSpan(SPANS.llm(request.model), {
        kind: SpanKind.CLIENT,
        attributes: { ...base, [ATTR.operation]: 'chat', [ATTR.requestModel]: request.model, ...(settings.content ? { [ATTR.input]: content(request.messages) } : {}) },
      }, turnContext), settings.content ? content : null),
      tool: (name, callId, args) => toolSpan(tracer.startSpan(SPANS.tool(name), {
        attributes: { ...base, [ATTR.operation]: 'execute_tool', [ATTR.toolName]: name, [ATTR.toolCallId]: callId, ...(settings.content ? { 'gen_ai.tool.call.arguments': content(args) } : {}) },
      }, turnContext), settings.content ? content : null),
      end: () => span.end(),
    }
  }
  return {
    turn,
    end: async (status, error) => {
      taskSpan.setAttribute(ATTR.taskStatus, status)
      if (error) taskSpan.setStatus({ code: SpanStatusCode.ERROR, message: maskText(error) })
      taskSpan.end()
      // Flushed on every ending (completed, failed, paused, lost): the process may exit right after.
      await provider.shutdown().catch(() => undefined)
    },
  }
}

function llmSpan(span: Span, content: ((value: unknown) => string) | null): LlmTrace {
  return {
    end: (reply) => {
      span.setAttributes({
        ...(reply.model ? { [ATTR.responseModel]: reply.model } : {}),
        ...(reply.inputTokens === null ? {} : { [ATTR.inputTokens]: reply.inputTokens }),
        ...(reply.outputTokens === null ? {} : { [ATTR.outputTokens]: reply.outputTokens }),
        ...(reply.cachedTokens === null ? {} : { [ATTR.cachedTokens]: reply.cachedTokens }),
        [ATTR.finishReasons]: [reply.finishReason],
        ...(content === null ? {} : { [ATTR.output]: content(reply.output) }),
      })
      span.end()
    },
    fail: (error) => {
      span.setAttribute(ATTR.errorType, (error as Error)?.name ?? 'Error')
      span.setStatus({ code: SpanStatusCode.ERROR, message: maskText((error as Error)?.message ?? String(error)) })
      span.end()
    },
  }
}

function toolSpan(span: Span, content: ((value: unknown) => string) | null): ToolTrace {
  return {
    end: (status, error, output) => {
      span.setAttribute(ATTR.toolStatus, status)
      if (content !== null) span.setAttribute('gen_ai.tool.call.result', content(output))
      if (status === 'error') span.setStatus({ code: SpanStatusCode.ERROR, message: maskText(error ?? 'error') })
      span.end()
    },
  }
}
