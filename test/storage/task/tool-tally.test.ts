import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { BUILTIN_TOOLS, cleanTally, ownerTally, toolLabeler } from '../../../src/storage/task/tool-tally.js'
import { parseState } from '../../../src/storage/task/state.js'
import { mcpToolName } from '../../../src/tools/mcp.js'
import { ToolRegistry } from '../../../src/tools/registry.js'

function taskDir(tools: { tool_name: unknown; status: unknown }[], tail = ''): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-tally-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(
    join(dir, 'tools.jsonl'),
    tools.map((t, i) => `${JSON.stringify({ seq: i + 1, ...t, result: 'r', error: null, duration_ms: 1 })}\n`).join('') + tail,
  )
  return dir
}

describe('tool call tallies', () => {
  it('knows every built-in tool by name', () => {
    expect([...BUILTIN_TOOLS].sort()).toEqual(ToolRegistry.builtin({ allowShell: true }).names().sort())
  })

  it('labels built-ins by name, MCP tools by their configured server, and any other name as other', () => {
    const long = 's'.repeat(70)
    const label = toolLabeler(['files', 'my.server', long])
    expect(label('read_file')).toBe('read_file')
    expect(label(mcpToolName('files', 'read_text_file'))).toBe('mcp:files')
    expect(label(mcpToolName('my.server', 'do stuff'))).toBe('mcp:my_server')
    expect(label(mcpToolName(long, 'x'))).toBe(`mcp:${'s'.repeat(64)}`)
    // Names the model made up: bounded to one label, whatever they hold.
    for (const name of ['files', 'nope__read', 'Read_File', 'evil"}\n# HELP x', '__proto__']) expect(label(name)).toBe('other')
    // The long server's label is one cleanTally keeps.
    expect(cleanTally({ [label(mcpToolName(long, 'x'))]: { success: 1 } })).toEqual({ [`mcp:${'s'.repeat(64)}`]: { success: 1 } })
  })

  it('reads a tally from any state.json as bounded labels and whole counts', () => {
    const mcp = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`mcp:s${i}`, { success: 1 }]))
    const raw = {
      read_file: { success: 2, error: 1, weird: 4 },
      'made up': { error: 3 },
      ...(JSON.parse('{"__proto__": {"success": 5}}') as object),
      grep: { success: 1.5, error: -1, x: '2' },
      glob: 7,
      ...mcp,
    }
    const tally = cleanTally(raw)
    expect(tally.read_file).toEqual({ success: 2, error: 1, unknown: 4 })
    expect(tally.other).toEqual({ error: 3, success: 5 + 4 })
    expect(Object.keys(tally).filter((k) => k.startsWith('mcp:'))).toHaveLength(16)
    expect(tally.grep).toBeUndefined()
    expect(Object.getPrototypeOf(tally)).toBe(Object.prototype)
    for (const bad of [null, 3, 'x', [1]]) expect(cleanTally(bad)).toEqual({})
    expect(parseState(JSON.stringify({ status: 'processing', tool_calls: raw }), 'state.json').tool_calls).toEqual(tally)
    // A state.json from before tallies has none (its calls are counted as unknown), not an empty one.
    expect(parseState(JSON.stringify({ status: 'processing', tool_call_count: 3 }), 'state.json').tool_calls).toBeUndefined()
  })

  it("catches an owner's tally up with the records its last state write missed", () => {
    const label = toolLabeler(['files'])
    const dir = taskDir([
      { tool_name: 'read_file', status: 'success' },
      { tool_name: 'files__x', status: 'error' },
      { tool_name: 'grep', status: 'success' },
    ])
    // The state counted the first record; a crash came before it counted the other two.
    expect(ownerTally(dir, { tool_calls: { read_file: { success: 1 } }, tool_call_count: 1, message_count: 2 }, 3, label)).toEqual({
      read_file: { success: 1 },
      'mcp:files': { error: 1 },
      grep: { success: 1 },
    })
    // Up to date: nothing read.
    expect(ownerTally(join(dir, 'nowhere'), { tool_calls: { grep: { success: 3 } }, tool_call_count: 3, message_count: 2 }, 3, label)).toEqual({
      grep: { success: 3 },
    })
    // Before tallies: what the state counted stays unknown (as the index counted it); the records after it are by tool.
    expect(ownerTally(dir, { tool_call_count: 2, message_count: 2 }, 3, label)).toEqual({ unknown: { unknown: 2 }, grep: { success: 1 } })
    // A state.json that counts nothing itself (not ctxagent's): the index counted the file's records, all unknown.
    expect(ownerTally(dir, { tool_call_count: 0 }, 3, label)).toEqual({ unknown: { unknown: 3 } })
    // Records that cannot be read are unknown, so the tally's sum stays the call count.
    const torn = taskDir([{ tool_name: 'read_file', status: 'success' }], '{"seq": 2, "tool_na')
    expect(ownerTally(torn, { tool_calls: {}, tool_call_count: 0, message_count: 0 }, 2, label)).toEqual({ read_file: { success: 1 }, unknown: { unknown: 1 } })
    // Network records (beside the calls, repeating a call's seq) are no calls: between two uncounted calls, skipped.
    const net = taskDir([{ tool_name: 'read_file', status: 'success' }])
    writeFileSync(
      join(net, 'tools.jsonl'),
      `{"seq":1,"kind":"network","tool_name":"network","status":"error"}\n{"seq":2,"tool_name":"grep","status":"success"}\n`,
      { flag: 'a' },
    )
    expect(ownerTally(net, { tool_calls: {}, tool_call_count: 0, message_count: 0 }, 2, label)).toEqual({ read_file: { success: 1 }, grep: { success: 1 } })
  })
})
