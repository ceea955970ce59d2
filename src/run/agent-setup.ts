import type { Config } from '../config/schema.js'
import { compressionLimit, settingsFrom } from '../context/compaction.js'
import { extractiveSummarizer, llmSummarizer } from '../context/summarizer.js'
import type { Summarizer } from '../context/summarizer.js'
import type { LlmClient } from '../llm/client.js'
import { ReplayClient } from '../llm/replay.js'
import type { RunSettings } from './settings.js'
import type { AgentLimits } from './turn.js'

// What a task's agent is built with from the config and the run's settings: its limits and its summarizer.

/** The agent's limits: the run's budgets, and the window's compaction and pruning for this client's context length. */
export function agentLimits(config: Config, settings: RunSettings, client: Pick<LlmClient, 'contextLength'>): AgentLimits {
  return {
    maxTurns: settings.maxTurns,
    maxTokens: settings.maxTokens,
    timeoutMs: settings.timeoutMs,
    compressAt: compressionLimit(config, client.contextLength),
    requestBudget: Math.floor(client.contextLength * 0.9),
    prune: {
      protectedTurns: config.context.prune.protected_turns,
      protectedToolRounds: config.context.prune.protected_tool_rounds,
      stepRounds: config.context.prune.step_rounds,
    },
    compaction: settingsFrom(config),
    commandTimeoutSeconds: settings.commandTimeoutSeconds,
    maxCallsPerReply: config.tools.max_calls_per_reply,
    maxRounds: config.context.compression.max_rounds,
    blobs: { thresholdBytes: config.context.blobs.threshold_bytes, maxInlineBytes: config.context.blobs.max_inline_bytes },
  }
}

/** Compaction's summaries: by the LLM, or extractive without one (a replay). */
export function summarizerFor(made: LlmClient, summaryClient: LlmClient, config: Config): Summarizer {
  return made instanceof ReplayClient ? extractiveSummarizer() : llmSummarizer(summaryClient, { maxTokens: config.context.compression.summary_max_tokens })
}
