// A Node.js client of the rollout ledger, straight from the .proto files:
// creates a session, appends a turn exactly once (request id + expected next
// seq), decodes two rich errors (google.rpc.BadRequest and PreconditionFailure
// from the grpc-status-details-bin trailer), stops the session and replays it.
//
// Usage: node client.js [WRITER_ADDRESS] [READER_ADDRESS]
//   (defaults 127.0.0.1:50051 and 127.0.0.1:50052; ROLLOUT_PROTOS names the
//   folder holding rollout/v1/*.proto, default ../../protos)
// Prints one JSON object describing what happened; exits 1 on an unexpected error.
'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTOS = process.env.ROLLOUT_PROTOS || path.join(__dirname, '..', '..', 'protos');
// google/rpc/status.proto and error_details.proto come from the google-proto-files package.
const GOOGLE_PROTOS = path.dirname(require.resolve('google-proto-files/package.json'));

const definition = protoLoader.loadSync(['rollout/v1/writer.proto', 'rollout/v1/reader.proto'], {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTOS],
});
const rollout = grpc.loadPackageDefinition(definition).rollout.v1;

const rpcTypes = new protobuf.Root();
rpcTypes.resolvePath = (_origin, target) => path.join(GOOGLE_PROTOS, target);
rpcTypes.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
const Status = rpcTypes.lookupType('google.rpc.Status');

// The google.rpc.Status of a failed call, with each detail decoded by its type URL.
function richError(error) {
  const [raw] = error.metadata ? error.metadata.get('grpc-status-details-bin') : [];
  const status = raw ? Status.decode(raw) : { details: [] };
  const details = status.details.map((any) => {
    const typeName = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
    const type = rpcTypes.lookupType(typeName);
    return { type: typeName, ...type.toObject(type.decode(any.value), { defaults: true }) };
  });
  return { code: grpc.status[error.code], message: error.details, details };
}

// A unary call as a promise.
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10000 }, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

// A call that must fail: its decoded rich error.
async function expectFailure(client, method, request) {
  try {
    await call(client, method, request);
  } catch (error) {
    return richError(error);
  }
  throw new Error(`${method} was expected to fail`);
}

async function main() {
  const [writerAddress = '127.0.0.1:50051', readerAddress = '127.0.0.1:50052'] = process.argv.slice(2);
  const credentials = grpc.credentials.createInsecure();
  const writer = new rollout.RolloutWriter(writerAddress, credentials);
  const reader = new rollout.RolloutReader(readerAddress, credentials);

  const created = await call(writer, 'CreateSession', { role: 'SESSION_ROLE_UNSPECIFIED', cwd: '/srv/app' });
  const sessionId = created.session_id;
  const turn = {
    session_id: sessionId,
    request_id: crypto.randomUUID(),
    expected_next_seq: created.next_seq,
    records: [
      { message: { role: 'user', text: 'Where is the config parsed?' } },
      {
        message: {
          role: 'assistant',
          text: 'Searching.',
          reasoning: { content: 'grep for the loader first' },
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'grep', arguments: '{"q":"config"}' } }],
        },
      },
      { message: { role: 'tool', tool_call_id: 'call_1', text: 'src/config.py:12: def parse(path):' } },
      { message: { role: 'assistant', text: 'In src/config.py, line 12.' } },
    ],
  };
  const appended = await call(writer, 'Append', turn);
  const retried = await call(writer, 'Append', turn); // same request id: the first answer, nothing written

  const badRequest = await expectFailure(writer, 'Append', {
    session_id: sessionId,
    records: [{ message: { role: 'tool', tool_call_id: 'call_nowhere', text: 'an output with no call' } }],
  });
  const precondition = await expectFailure(writer, 'Append', {
    session_id: sessionId,
    expected_next_seq: 1,
    records: [{ message: { role: 'user', text: 'written at a seq that is taken' } }],
  });

  const stopped = await call(writer, 'Stop', {
    session_id: sessionId,
    stop_kind: 'STOP_KIND_PAUSED',
    reason: 'waiting for review',
  });
  const replay = await call(reader, 'GetReplay', { session_id: sessionId });
  const facts = await call(reader, 'GetStopFacts', { session_id: sessionId });

  writer.close();
  reader.close();
  process.stdout.write(
    JSON.stringify({
      session_id: sessionId,
      appended: { seqs: appended.seqs, next_seq: appended.next_seq },
      retried: { seqs: retried.seqs, next_seq: retried.next_seq },
      bad_request: badRequest,
      precondition,
      stopped: { digest: stopped.digest, message_count: stopped.message_count },
      replay: {
        messages: replay.messages.map((m) => ({ role: m.role, text: m.content === 'text' ? m.text : null })),
        digest_status: replay.digest_status,
      },
      stop_facts: { stop_kind: facts.stop_kind, reason: facts.reason, replayable: facts.resume.replayable },
    }) + '\n',
  );
}

main().catch((error) => {
  process.stderr.write(`node client failed: ${error.stack || error}\n`);
  process.exit(1);
});
