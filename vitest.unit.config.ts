import { defineConfig } from 'vitest/config'

// `npm run test:unit`: the loop to run while editing (docs/development.md#tests). The files
// here start no process, open no server and reach no database; test/helpers/no-processes.ts
// makes each of those throw, so a file that starts needing one fails here and moves to
// `npm test` (which runs these too). Add a file when it needs none of them.
const FILES = [
  'test/actions/{actor,comment,compress,enqueue,job-placement}.test.ts',
  'test/architecture/layers.test.ts',
  'test/bench/dist-imports.test.ts',
  'test/bench/merge.test.ts',
  'test/commands/jobs-list.test.ts',
  'test/commands/run-options.test.ts',
  'test/commands/run-prepare.test.ts',
  'test/commands/view-render.test.ts',
  'test/config/example.test.ts',
  'test/config/trust.test.ts',
  'test/context/prune.test.ts',
  'test/docs/*.test.ts',
  'test/fleet/task-outcome.test.ts',
  'test/fleet/worker-log.test.ts',
  'test/helpers/in-process.test.ts',
  'test/helpers/system-packages.test.ts',
  'test/llm/reply.test.ts',
  'test/operations/tokens.test.ts',
  'test/cli.test.ts',
  'test/render.test.ts',
  'test/run/log.test.ts',
  'test/run/heap-collect.test.ts',
  'test/run/parts.test.ts',
  'test/storage/blob.test.ts',
  'test/storage/format/*.test.ts',
  'test/storage/fs/*.test.ts',
  'test/storage/task/{lifecycle,message-store,reader,state,tool-tally}.test.ts',
  'test/system-errors.test.ts',
  'test/text.test.ts',
  'test/xdg.test.ts',
  'test/tools/{edit-write,inspect,read-file,registry,schema,search,stop,workspace}.test.ts',
  'test/tools/sandbox/units.test.ts',
]
const EXCLUDE = ['test/storage/format/shared-append.test.ts']

/** The files that measure V8's heap: each in a process of its own, where no other file's garbage is collected under it. */
const HEAP = ['test/run/heap-collect.test.ts']

export default defineConfig({
  test: {
    setupFiles: ['test/helpers/no-processes.ts'],
    // A loaded machine (CI beside other work) is slow, never wrong: no test here waits on time.
    testTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      // Files share their worker process (and its loaded modules) instead of one each: no file here leaves a
      // process, a server, a variable or a mock behind (none of them may, above), and the loop takes ~10 s
      // instead of ~50 (CI runs it on Node 22 and 24 too). A file that needs a process of its own belongs to
      // `npm test`, or to the heap project below.
      { extends: true, test: { name: 'shared', include: FILES, exclude: [...EXCLUDE, ...HEAP], isolate: false } },
      // heap-collect measures how much the old generation grew: in a process shared with earlier files, a
      // full GC of their garbage hid the growth it made (Node 24: 32 bytes where it made over 2 MB).
      { extends: true, test: { name: 'heap', include: HEAP } },
    ],
  },
})
