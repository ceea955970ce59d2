import type { Config } from './schema.js'

/** The model and context length of the configured provider (replay and none have no server). */
export function activeEndpoint(config: Config): { model: string; context_length: number } {
  const llm = config.llm
  if (llm.provider === 'replay') return { model: 'replay', context_length: llm.replay.context_length }
  return llm.provider === 'ollama' ? llm.ollama : llm.provider === 'anthropic' ? llm.anthropic : llm.openai
}

/**
 * The provider's hosted API with no key: every request would be refused, so nothing
 * is started. A key-less server elsewhere (a local server, a proxy holding the key) is
 * the operator's to choose.
 */
export function missingApiKey(config: Config): { message: string; hint: string } | null {
  const { provider, openai, anthropic } = config.llm
  if (provider === 'openai' && openai.api_key === null && /^https:\/\/api\.openai\.com\b/.test(openai.base_url)) {
    return {
      message: 'no OpenAI API key is set',
      hint: 'set OPENAI_API_KEY or llm.openai.api_key, or point llm.openai.base_url (OPENAI_BASE_URL) at a local server',
    }
  }
  if (provider === 'anthropic' && anthropic.api_key === null && /^https:\/\/api\.anthropic\.com\b/.test(anthropic.base_url)) {
    return { message: 'no Anthropic API key is set', hint: 'set ANTHROPIC_API_KEY or llm.anthropic.api_key' }
  }
  return null
}
