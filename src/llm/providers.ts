import { missingApiKey } from '../config/endpoint.js'
import type { Config } from '../config/schema.js'
import { UsageError } from '../errors.js'
import { AnthropicClient } from './anthropic.js'
import type { LlmClient, ProviderWait } from './client.js'
import { OpenAiCompatibleClient } from './openai-compatible.js'

/** The configured client, or null with llm.provider none or replay (replay plays a recording, see replay.ts). */
export function createLlmClient(config: Config, onWait?: (wait: ProviderWait) => void): LlmClient | null {
  const provider = config.llm.provider
  if (provider === 'none' || provider === 'replay') return null
  const limits = { ...llmLimits(config), ...(onWait ? { onWait } : {}) }
  if (provider === 'anthropic') return new AnthropicClient(config.llm.anthropic, limits)
  return new OpenAiCompatibleClient(provider === 'ollama' ? config.llm.ollama : config.llm.openai, provider, limits)
}

/** The configured client, or a usage error saying how to configure one. */
export function requireLlmClient(config: Config, onWait?: (wait: ProviderWait) => void): LlmClient {
  const provider = config.llm.provider
  if (provider === 'replay') throw new UsageError('the replay provider cannot summarize', 'use --extractive, or set llm.provider to a real LLM')
  const missing = missingApiKey(config)
  if (missing !== null) throw new UsageError(missing.message, `${missing.hint}, or use --extractive (no LLM needed)`)
  const client = createLlmClient(config, onWait)
  if (client === null) throw new UsageError('no LLM is configured (llm.provider: none)', 'set llm.provider in the config, or use --extractive')
  return client
}

/** The client limits of llm.* (max_tokens, the longest server-chosen wait, the largest response). */
export function llmLimits(config: Config): { maxOutputTokens: number; maxRetryWait: number; maxResponseBytes: number } {
  return { maxOutputTokens: config.llm.max_output_tokens, maxRetryWait: config.llm.max_retry_wait, maxResponseBytes: config.llm.max_response_bytes }
}
