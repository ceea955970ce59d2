// A task owner: writes "ready", waits for <base>/go (so a follower can attach
// first), writes `count` messages 50 ms apart, then completes the task.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { parseConfig } from '../../dist/config/load.js'
import { Layout } from '../../dist/storage/fs/layout.js'
import { createTask } from '../../dist/storage/task/lifecycle.js'

const [base, count = '5'] = process.argv.slice(2)
const env = { layout: new Layout(base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined }
const handle = await createTask(env, { task_key: { task_source: 'local', owner: 'me', repo: 'demo', task_type: 'task', task_id: '1' }, user: 'tester' })
await handle.setStatus('processing')
handle.addMessage({ role: 'assistant', content: 'ready' })
process.stdout.write(`${handle.uuid}\n`)
while (!existsSync(join(base, 'go'))) await new Promise((r) => setTimeout(r, 20))
for (let i = 1; i <= Number(count); i++) {
  handle.addMessage({ role: 'assistant', content: `step ${i}` })
  await new Promise((r) => setTimeout(r, 50))
}
await handle.complete('done')
