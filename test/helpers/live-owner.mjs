// A task owner driven line by line from stdin, for the page's live tests: creates a task
// under <base> (real lock and heartbeat, index <base>/tasks.db), prints its uuid, then
// for each line "say <text>" appends an assistant message, "tool <text>" a tool call and
// its result, "raw <json>" appends that message as it is, "done" completes the task and exits 0. Prints "ok <n>" after each step.
import { createInterface } from 'node:readline'
import { parseConfig } from '../../dist/config/load.js'
import { Layout } from '../../dist/storage/fs/layout.js'
import { SqliteStore } from '../../dist/storage/index/store.js'
import { createTask } from '../../dist/storage/task/lifecycle.js'

const [base, statement = 'a live task'] = process.argv.slice(2)
const config = parseConfig('locks:\n  heartbeat_seconds: 0.5\n')
const layout = new Layout(base)
const index = SqliteStore.open(layout.db)
const env = { layout, config, index, now: () => new Date(), warn: (m) => process.stderr.write(`${m}\n`) }
const handle = await createTask(env, {
  task_key: { task_source: 'local', owner: null, repo: 'demo', task_type: 'task', task_id: 'live-1' },
  user: 'livetester',
})
await handle.setStatus('processing')
handle.addMessage({ role: 'system', content: 'You are a coding agent.' })
handle.addMessage({ role: 'user', content: statement })
process.stdout.write(`${handle.uuid}\n`)
let n = 0
for await (const line of createInterface({ input: process.stdin })) {
  const [verb, ...rest] = line.split(' ')
  const text = rest.join(' ')
  if (verb === 'say') handle.addMessage({ role: 'assistant', content: text })
  else if (verb === 'tool') {
    const id = `call_${++n}`
    handle.addMessage({
      role: 'assistant',
      content: '',
      tool_calls: [{ id, type: 'function', function: { name: 'read_file', arguments: JSON.stringify({ path: text }) } }],
    })
    handle.addMessage({ role: 'tool', tool_name: 'read_file', tool_call_id: id, content: `contents of ${text}` })
  } else if (verb === 'raw') handle.addMessage(JSON.parse(text))
  else if (verb === 'done') {
    await handle.complete('all done')
    await index.close()
    process.stdout.write('ok done\n')
    process.exit(0)
  }
  process.stdout.write(`ok ${++n}\n`)
}
