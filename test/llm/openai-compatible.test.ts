import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { ProviderError, UsageError } from '../../src/errors.js'
import { createLlmClient, requireLlmClient } from '../../src/llm/openai-compatible.js'
import { startFakeLlm } from '../helpers/fake-llm.js'

describe('OpenAI-compatible client', () => {
  it('sends the model and messages and returns the reply with usage', async () => {
    const fake = await startFakeLlm()
    fake.queue.push({ content: 'hello', usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    const reply = await client.chat([{ role: 'user', content: 'hi' }], { temperature: 0, maxTokens: 50 })
    expect(reply).toEqual({ message: { role: 'assistant', content: 'hello' }, usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } })
    expect(fake.requests[0]).toMatchObject({ path: '/v1/chat/completions', body: { model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], temperature: 0, max_tokens: 50 } })
    expect(client.contextLength).toBe(8000)
  })

  it('retries a 500 with backoff, then succeeds', async () => {
    const fake = await startFakeLlm()
    fake.queue.push({ status: 500, headers: { 'retry-after-ms': '10' } }, { content: 'second time lucky' })
    const reply = await requireLlmClient(parseConfig(fake.configYaml())).chat([{ role: 'user', content: 'x' }])
    expect(reply.message.content).toBe('second time lucky')
    expect(fake.requests).toHaveLength(2)
  })

  it('turns failures into one clear line: status, unreachable server, bad key', async () => {
    const fake = await startFakeLlm()
    fake.fallback = () => ({ status: 503, headers: { 'retry-after-ms': '5' }, content: 'overloaded' })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    await expect(client.chat([{ role: 'user', content: 'x' }])).rejects.toThrow(new RegExp(`LLM server ${fake.url.replace(/[/.]/g, '\\$&')} \\(openai, model fake-model\\) answered 503 after 2 retries`))
    expect(fake.requests).toHaveLength(3)
    fake.fallback = () => ({ status: 401, content: 'bad key' })
    await expect(client.chat([{ role: 'user', content: 'x' }])).rejects.toMatchObject({ message: expect.stringContaining('refused the API key'), hint: 'check llm.openai.api_key or OPENAI_API_KEY' })
    const dead = requireLlmClient(parseConfig('llm:\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    max_retries: 0\n'))
    const err = await dead.chat([{ role: 'user', content: 'x' }]).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(ProviderError)
    expect((err as ProviderError).message).toMatch(/^cannot reach LLM server http:\/\/127\.0\.0\.1:9\/v1/)
  })

  it('uses the Ollama endpoint for provider ollama, and none means no client', () => {
    const ollama = createLlmClient(parseConfig('llm:\n  provider: ollama\n'))
    expect(ollama?.model).toBe('llama3.1')
    expect(createLlmClient(parseConfig('llm:\n  provider: none\n'))).toBeNull()
    expect(() => requireLlmClient(parseConfig('llm:\n  provider: none\n'))).toThrow(UsageError)
  })
})
