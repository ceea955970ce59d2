// A real MCP server (the SDK's own server classes over stdio) that behaves badly on purpose.
// node hostile-mcp.mjs <mode> [n]
//   endless  tools/list always returns another page of n tools (and a fresh cursor)
//   many     one page of n tools
//   big      the tool `big` answers n characters of text; the tool `hang` never answers
//   dup      tools/list lists `a` twice, and `b`
//   huge     a tool with a 1 MB description, one with a huge schema, and a plain one
//   hang     tools/list never answers; first writes this server's pid to the file named by n
//   fetch    the tool `fetch` GETs http://<target>/mcp through HTTP_PROXY (a sandboxed server behind its egress proxy)
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'

import { writeFileSync } from 'node:fs'
import { get } from 'node:http'

const [mode = 'many', count = '10'] = process.argv.slice(2)
const n = Number(count)
const tool = (name) => ({ name, description: `tool ${name}`, inputSchema: { type: 'object', properties: {} } })
const server = new Server({ name: 'hostile', version: '1.0.0' }, { capabilities: { tools: {} } })

let page = 0
server.setRequestHandler(ListToolsRequestSchema, async () => {
  if (mode === 'endless') {
    page++
    process.stderr.write(`page ${page}\n`)
    return { tools: Array.from({ length: n }, (_, i) => tool(`p${page}_t${i}`)), nextCursor: `c${page}` }
  }
  if (mode === 'hang') {
    writeFileSync(count, String(process.pid))
    return new Promise(() => undefined)
  }
  if (mode === 'huge') {
    // A 1 MB description, and a schema of 100,000 properties.
    const properties = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`p${i}`, { type: 'string' }]))
    return { tools: [{ ...tool('wordy'), description: 'w'.repeat(1_000_000) }, { ...tool('wide'), inputSchema: { type: 'object', properties } }, tool('fine')] }
  }
  if (mode === 'dup') return { tools: [tool('a'), tool('a'), tool('b')] }
  if (mode === 'big') return { tools: [tool('big'), tool('hang')] }
  if (mode === 'fetch')
    return { tools: [{ ...tool('fetch'), inputSchema: { type: 'object', properties: { target: { type: 'string' } }, required: ['target'] } }] }
  return { tools: Array.from({ length: n }, (_, i) => tool(`t${String(i).padStart(5, '0')}`)) }
})
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  if (req.params.name === 'hang') return new Promise(() => undefined)
  if (req.params.name === 'big') return { content: [{ type: 'text', text: 'x'.repeat(n) }] }
  if (req.params.name === 'fetch') {
    const target = String(req.params.arguments?.target ?? '')
    const proxy = new URL(process.env.HTTP_PROXY || 'http://127.0.0.1:1')
    const text = await new Promise((resolve) => {
      get({ host: proxy.hostname, port: proxy.port, path: `http://${target}/mcp`, headers: { host: target } }, (res) => {
        let body = ''
        res.on('data', (d) => (body += d))
        res.on('end', () => resolve(`fetch ${target} ${res.statusCode} ${body.trim()}`))
      }).on('error', (e) => resolve(`fetch ${target} error ${e.code}`))
    })
    return { content: [{ type: 'text', text }] }
  }
  return { content: [{ type: 'text', text: `called ${req.params.name}` }] }
})
await server.connect(new StdioServerTransport())
