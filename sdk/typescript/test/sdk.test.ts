// node --test dist/test/: pure checks always; against a cluster when FLUX_V1_BROKERS names its
// V1 listeners (tests/integration/test_v1_typescript.py starts one and runs this).
import { test } from "node:test";
import assert from "node:assert/strict";
import { FLUXClient, FLUXProtocolError, FLUXRuntime, fnv1a32, parseAnswer } from "../src/index";

const brokers = (process.env.FLUX_V1_BROKERS ?? "").split(",").filter((b) => b);
const live = { skip: brokers.length === 0 ? "FLUX_V1_BROKERS is not set" : false, timeout: 240000 };
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor<T>(check: () => Promise<T | undefined>, ms = 30000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await check().catch(() => undefined);
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(50);
  }
}

test("fnv1a32 matches the FNV-1a test vectors", () => {
  assert.equal(fnv1a32(""), 0x811c9dc5);
  assert.equal(fnv1a32("a"), 0xe40c292c);
  assert.equal(fnv1a32("foobar"), 0xbf9cf968);
});

test("answers parse, errors carry code, message and the line", () => {
  assert.deepEqual(parseAnswer("V1|3|OK|partition=2 offset=0 hw=1", "3"), { partition: "2", offset: "0", hw: "1" });
  assert.throws(() => parseAnswer("V1|4|ERR|NOT_LEADER|orders-0 is led by broker 2 at 127.0.0.1:9301", "4"), (error: any) =>
    error instanceof FLUXProtocolError && error.code === "NOT_LEADER" && error.leaderAddress === "127.0.0.1:9301" && error.response.startsWith("V1|4|ERR"));
});

async function createTopic(client: FLUXClient, topic: string, partitions: number): Promise<void> {
  await client.adminCreateTopic(topic, partitions, 3).catch((error) => {
    if (!String(error.message).includes("TOPIC_ALREADY_EXISTS")) throw error;
  });
  await waitFor(async () => {
    const metadata = await client.adminGetMetadata();
    const ready = [...Array(partitions).keys()].every((p) => (metadata.leaders.get(`${topic}/${p}`) ?? -1) >= 0);
    return ready ? true : undefined;
  });
}

test("the client speaks the commands, pipelined", live, async () => {
  const client = new FLUXClient(brokers[0]);
  await client.connect();
  try {
    await createTopic(client, "ts-basic", 1);
    const metadata = await client.adminGetMetadata();
    const leader = new FLUXClient(metadata.brokers.get(metadata.leaders.get("ts-basic/0")!)!);
    await leader.connect();
    const sent = await Promise.all([...Array(100).keys()].map((i) => leader.produce("ts-basic", "k", `v${i}`, "all")));
    const offsets = sent.map((s) => s.offset);
    assert.deepEqual(offsets, [...offsets].sort((a, b) => a - b));
    assert.equal(new Set(offsets).size, 100);
    const consumed = await leader.consume("ts-basic", 0, offsets[0], 1000);
    assert.deepEqual(consumed.messages.map(([, v]) => v), [...Array(100).keys()].map((i) => `v${i}`));
    leader.close();
    await assert.rejects(client.consume("no-such-topic", 0, 0), (error: any) => error.code === "UNKNOWN_TOPIC");
  } finally {
    client.close();
  }
});

test("the runtime produces and a consumer group reads it all", live, async () => {
  const admin = new FLUXClient(brokers[0]);
  await admin.connect();
  await createTopic(admin, "ts-runtime", 3);
  admin.close();
  const runtime = new FLUXRuntime({ brokers: [brokers[1]] });
  const producer = runtime.producer({ maxRetries: 5, retryBackoffMs: 100, batchSize: 50 });
  const sent = await producer.send({ topic: "ts-runtime", messages: [...Array(150).keys()].map((i) => ({ key: `user${i}`, value: `event-${i}` })) });
  assert.equal(sent.length, 150);
  assert.deepEqual([...new Set(sent.map((s) => s.partition))].sort(), [0, 1, 2]);
  const seen = new Set<string>();
  let assigned: number[] = [];
  const consumerRuntime = new FLUXRuntime({ brokers });
  const consumer = consumerRuntime.consumer({ groupId: "ts-group", consumerId: "ts-1", heartbeatIntervalMs: 200, onAssign: (p) => { assigned = p; } });
  consumer.subscribe({ topic: "ts-runtime" });
  await consumer.run({ eachMessage: (m) => { seen.add(m.value); }, maxMessages: 150 });
  await consumer.disconnect();
  consumerRuntime.disconnect();  // open sockets would keep node --test waiting
  runtime.disconnect();
  assert.deepEqual(assigned, [0, 1, 2]);
  assert.equal(seen.size, 150);
});

/** The broker coordinating `group`: the one that answers OFFSET (the others name it). */
async function coordinatorOf(client: FLUXClient, group: string, topic: string): Promise<string> {
  try {
    await client.offset(group, topic, 0);
    return client.address;
  } catch (error) {
    if (error instanceof FLUXProtocolError && error.code === "NOT_LEADER" && error.leaderAddress) return error.leaderAddress;
    throw error;
  }
}

test("the runtime producer and consumer survive a SIGKILL of a leader that coordinates the group", { ...live, skip: process.env.FLUX_V1_VICTIMS ? live.skip : "FLUX_V1_VICTIMS is not set" }, async () => {
  const group = "ts-kill-group";
  const admin = new FLUXClient(brokers[0]);
  await admin.connect();
  await createTopic(admin, "ts-kill", 3);
  const metadata = await admin.adminGetMetadata();
  const coordinator = await waitFor(() => coordinatorOf(admin, group, "ts-kill"));
  admin.close();
  // FLUX_V1_VICTIMS: "<node id>=<pid>,...": kill the group's coordinator, a partition leader too.
  const pids = new Map((process.env.FLUX_V1_VICTIMS ?? "").split(",").map((e) => e.split("=").map(Number) as [number, number]));
  const victim = [...metadata.brokers].find(([, address]) => address === coordinator)![0];
  assert.ok([0, 1, 2].some((p) => metadata.leaders.get(`ts-kill/${p}`) === victim), "the coordinator leads a partition of ts-kill");
  const consumerRuntime = new FLUXRuntime({ brokers });
  const consumer = consumerRuntime.consumer({ groupId: group, consumerId: "survivor", heartbeatIntervalMs: 200, maxRetries: 60, retryBackoffMs: 100 });
  consumer.subscribe({ topic: "ts-kill" });
  const seen = new Set<string>();
  let readError: unknown;
  const reading = consumer.run({ eachMessage: (m) => { seen.add(m.value); } }).catch((error) => { readError = error; return 0; });
  await waitFor(async () => (consumer.assigned.length === 3 || readError !== undefined ? true : undefined));
  const runtime = new FLUXRuntime({ brokers });
  // Generous retries: after the kill the new leader waits for a follower back in its ISR.
  const producer = runtime.producer({ maxRetries: 60, retryBackoffMs: 100, batchSize: 20 });
  const acknowledged: Array<[number, number, string]> = [];
  for (let round = 0; round < 15; round++) {
    if (round === 4) process.kill(pids.get(victim)!, "SIGKILL");
    const messages = [...Array(20).keys()].map((i) => ({ key: `u${round}-${i}`, value: `r${round}-${i}` }));
    const results = await producer.send({ topic: "ts-kill", messages });
    results.forEach((r, i) => acknowledged.push([r.partition, r.offset, messages[i].value]));
  }
  runtime.disconnect();
  await waitFor(async () => (readError !== undefined || acknowledged.every(([, , v]) => seen.has(v)) ? true : undefined), 90000);
  assert.equal(readError, undefined);
  await consumer.disconnect();
  await reading;
  consumerRuntime.disconnect();
  const survivor = new FLUXClient(brokers.find((b) => b !== coordinator)!);
  await survivor.connect();
  const after = await waitFor(async () => {
    const m = await survivor.adminGetMetadata();
    return [0, 1, 2].every((p) => ![-1, victim].includes(m.leaders.get(`ts-kill/${p}`) ?? -1)) ? m : undefined;
  });
  const stored = new Map<string, string>();
  const ends: number[] = [];
  for (const partition of [0, 1, 2]) {
    const leader = new FLUXClient(after.brokers.get(after.leaders.get(`ts-kill/${partition}`)!)!);
    await leader.connect();
    const { messages, hw } = await leader.consume("ts-kill", partition, 0, 1000);
    for (const [offset, value] of messages) stored.set(`${partition}/${offset}`, value);
    ends.push(hw);
    leader.close();
  }
  const lost = acknowledged.filter(([p, o, v]) => stored.get(`${p}/${o}`) !== v);
  assert.equal(acknowledged.length, 300);
  assert.deepEqual(lost, []);
  // Auto-commit reached every partition's end, at whichever broker coordinates the group now.
  const now = new FLUXClient(await coordinatorOf(survivor, group, "ts-kill"));
  survivor.close();
  await now.connect();
  const committed = [];
  for (const partition of [0, 1, 2]) committed.push(await now.offset(group, "ts-kill", partition));
  now.close();
  assert.deepEqual(committed, ends);
});
