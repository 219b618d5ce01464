// FLUXRuntime: a KafkaJS-like producer and consumer on the V1 protocol. The producer routes each
// message to its partition's leader (FNV-1a of the key, leaders from ADMIN_GET_METADATA),
// follows NOT_LEADER to the broker it names (else the next one) and retries UNAVAILABLE,
// REPLICATION_TIMEOUT and broken connections up to maxRetries with a growing backoff. A
// retried produce may be stored twice: V1 has no idempotence.
import { FLUXClient, FLUXProtocolError, Metadata } from "./client";

export function fnv1a32(text: string): number {
  let value = 0x811c9dc5;
  for (const byte of new TextEncoderShim().encode(text)) {
    value ^= byte;
    value = Math.imul(value, 0x01000193) >>> 0;
  }
  return value >>> 0;
}

// UTF-8 bytes without depending on TextEncoder's type declarations.
class TextEncoderShim {
  encode(text: string): number[] {
    const bytes: number[] = [];
    for (const char of unescape(encodeURIComponent(text))) bytes.push(char.charCodeAt(0));
    return bytes;
  }
}
declare function unescape(text: string): string;

const RETRIABLE = new Set(["NOT_LEADER", "UNAVAILABLE", "REPLICATION_TIMEOUT"]);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface ProducerSettings { maxRetries?: number; retryBackoffMs?: number; batchSize?: number }
export interface Message { key?: string; value: string }
export interface ConsumedMessage { topic: string; partition: number; offset: number; value: string }
export interface ConsumerSettings {
  groupId: string;
  consumerId: string;
  assignor?: "range" | "round_robin";
  autoCommit?: boolean;
  autoRejoin?: boolean;
  onAssign?: (partitions: number[]) => void;
  onRevoke?: (partitions: number[]) => void;
  onCrash?: (error: Error) => void;
  heartbeatIntervalMs?: number;
  maxRetries?: number;
  retryBackoffMs?: number;
}

export class FLUXRuntime {
  readonly brokers: string[];
  private connections = new Map<string, FLUXClient>();
  private cached: Metadata | undefined;
  private next = 0;

  constructor(settings: { brokers: string[] }) {
    if (settings.brokers.length === 0) throw new Error("name at least one broker (host:port of its V1 listener)");
    this.brokers = [...settings.brokers];
  }

  producer(settings: ProducerSettings = {}): FLUXProducer { return new FLUXProducer(this, settings); }
  consumer(settings: ConsumerSettings): FLUXConsumer { return new FLUXConsumer(this, settings); }

  async connection(address: string): Promise<FLUXClient> {
    let client = this.connections.get(address);
    if (client === undefined) {
      client = new FLUXClient(address);
      this.connections.set(address, client);
      try {
        await client.connect();
      } catch (error) {
        this.connections.delete(address);
        throw error;
      }
    }
    return client;
  }

  forget(address: string): void {
    this.connections.get(address)?.close();
    this.connections.delete(address);
  }

  rotate(): string {
    this.next += 1;
    return this.brokers[this.next % this.brokers.length];
  }

  async metadata(refresh = false): Promise<Metadata> {
    if (this.cached !== undefined && !refresh) return this.cached;
    let last: unknown;
    for (let i = 0; i < this.brokers.length; i++) {
      const address = this.brokers[this.next % this.brokers.length];
      try {
        this.cached = await (await this.connection(address)).adminGetMetadata();
        return this.cached;
      } catch (error) {
        last = error;
        this.forget(address);
        this.next += 1;
      }
    }
    throw new Error(`no broker of ${this.brokers.join(",")} answers: ${last}`);
  }

  async call<T>(route: () => Promise<string>, command: (client: FLUXClient) => Promise<T>, maxRetries: number, backoffMs: number): Promise<T> {
    let address: string | undefined;
    for (let attempt = 0; ; attempt++) {
      if (address === undefined) address = await route();
      try {
        return await command(await this.connection(address));
      } catch (error) {
        if (attempt >= maxRetries) throw error;
        if (error instanceof FLUXProtocolError) {
          if (!RETRIABLE.has(error.code)) throw error;
          const named = error.leaderAddress;
          await this.metadata(true).catch(() => undefined);
          address = named;
        } else {
          this.forget(address);
          this.rotate();
          await this.metadata(true).catch(() => undefined);
          address = undefined;
        }
      }
      await sleep(backoffMs * Math.min(attempt + 1, 10));
    }
  }

  async leaderOf(topic: string, partition: number): Promise<string> {
    const metadata = await this.metadata();
    const leader = metadata.leaders.get(`${topic}/${partition}`) ?? -1;
    return metadata.brokers.get(leader) ?? this.brokers[this.next % this.brokers.length];
  }

  disconnect(): void {
    for (const client of this.connections.values()) client.close();
    this.connections.clear();
  }
}

export class FLUXProducer {
  private readonly maxRetries: number;
  private readonly backoffMs: number;
  private readonly batchSize: number;

  constructor(private readonly runtime: FLUXRuntime, settings: ProducerSettings) {
    this.maxRetries = settings.maxRetries ?? 5;
    this.backoffMs = settings.retryBackoffMs ?? 200;
    this.batchSize = Math.max(1, settings.batchSize ?? 100);
  }

  /** Produce each message; their {partition, offset, hw} in order. */
  async send(request: { topic: string; messages: Message[]; acks?: "0" | "1" | "all" }) {
    const results = [];
    for (let start = 0; start < request.messages.length; start += this.batchSize) {
      const chunk = request.messages.slice(start, start + this.batchSize);
      results.push(...(await Promise.all(chunk.map((m) => this.one(request.topic, m, request.acks ?? "all")))));
    }
    return results;
  }

  private one(topic: string, message: Message, acks: "0" | "1" | "all") {
    const key = message.key ?? "";
    const route = async () => {
      const metadata = await this.runtime.metadata();
      const count = metadata.topics.get(topic);
      if (!count) return this.runtime.rotate();
      return this.runtime.leaderOf(topic, fnv1a32(key) % count);
    };
    return this.runtime.call(route, (client) => client.produce(topic, key, message.value, acks), this.maxRetries, this.backoffMs);
  }
}

export class FLUXConsumer {
  generation = -1;
  assigned: number[] = [];
  private topic: string | undefined;
  private positions = new Map<number, number>();
  private coordinator: string | undefined;
  private stopped = false;

  constructor(private readonly runtime: FLUXRuntime, private readonly settings: ConsumerSettings) {}

  subscribe(request: { topic: string }): void { this.topic = request.topic; }

  private async atCoordinator<T>(command: (client: FLUXClient) => Promise<T>): Promise<T> {
    const retries = this.settings.maxRetries ?? 10;
    for (let attempt = 0; ; attempt++) {
      const address = this.coordinator ?? this.runtime.brokers[attempt % this.runtime.brokers.length];
      try {
        const result = await command(await this.runtime.connection(address));
        this.coordinator = address;
        return result;
      } catch (error) {
        if (attempt >= retries) throw error;
        if (error instanceof FLUXProtocolError) {
          if (error.code === "NOT_LEADER" && error.leaderAddress) this.coordinator = error.leaderAddress;
          else if (error.code !== "UNAVAILABLE") throw error;
        } else {
          this.runtime.forget(address);
          this.coordinator = undefined;
        }
        await sleep(this.settings.retryBackoffMs ?? 200);
      }
    }
  }

  async join(): Promise<number[]> {
    const topic = this.requireTopic();
    const answer = await this.atCoordinator((c) => c.join(this.settings.groupId, topic, this.settings.consumerId, this.settings.assignor ?? "range"));
    this.generation = answer.generation;
    this.assigned = answer.assigned;
    this.positions.clear();
    for (const partition of this.assigned) {
      const committed = await this.atCoordinator((c) => c.offset(this.settings.groupId, topic, partition));
      this.positions.set(partition, Math.max(committed, 0));
    }
    this.settings.onAssign?.([...this.assigned]);
    return this.assigned;
  }

  /** Hand every message of the assigned partitions to eachMessage until disconnect() or maxMessages. */
  async run(options: { eachMessage: (message: ConsumedMessage) => void | Promise<void>; maxMessages?: number; pollIntervalMs?: number }): Promise<number> {
    const topic = this.requireTopic();
    if (this.generation < 0) await this.join();
    let handed = 0;
    let nextHeartbeat = Date.now() + (this.settings.heartbeatIntervalMs ?? 1000);
    while (!this.stopped && (options.maxMessages === undefined || handed < options.maxMessages)) {
      if (Date.now() >= nextHeartbeat) {
        nextHeartbeat = Date.now() + (this.settings.heartbeatIntervalMs ?? 1000);
        if (!(await this.heartbeat())) continue;
      }
      let got = 0;
      for (const partition of [...this.assigned]) {
        let answer;
        try {
          answer = await this.runtime.call(() => this.runtime.leaderOf(topic, partition), (c) => c.consume(topic, partition, this.positions.get(partition) ?? 0), this.settings.maxRetries ?? 10, this.settings.retryBackoffMs ?? 200);
        } catch (error) {
          if (error instanceof FLUXProtocolError) continue;
          throw error;
        }
        for (const [offset, value] of answer.messages) {
          if (options.maxMessages !== undefined && handed >= options.maxMessages) break;
          try {
            await options.eachMessage({ topic, partition, offset, value });
          } catch (error) {
            this.settings.onCrash?.(error as Error);
            throw error;
          }
          handed += 1;
          got += 1;
          this.positions.set(partition, offset + 1);
          if (this.settings.autoCommit ?? true) {
            try {
              await this.atCoordinator((c) => c.commit(this.settings.groupId, topic, this.settings.consumerId, this.generation, partition, offset + 1));
            } catch (error) {
              if (!(error instanceof FLUXProtocolError && error.code === "GENERATION_MISMATCH")) throw error;
            }
          }
        }
      }
      if (got === 0) await sleep(options.pollIntervalMs ?? 100);
    }
    return handed;
  }

  private async heartbeat(): Promise<boolean> {
    const topic = this.requireTopic();
    try {
      await this.atCoordinator((c) => c.heartbeat(this.settings.groupId, topic, this.settings.consumerId, this.generation));
      return true;
    } catch (error) {
      if (!(error instanceof FLUXProtocolError && error.code === "GENERATION_MISMATCH")) throw error;
    }
    this.settings.onRevoke?.([...this.assigned]);
    this.assigned = [];
    if (this.settings.autoRejoin ?? true) await this.join();
    else this.stopped = true;
    return false;
  }

  async disconnect(): Promise<void> {
    this.stopped = true;
    if (this.topic !== undefined && this.generation >= 0) {
      const topic = this.topic;
      await this.atCoordinator((c) => c.leave(this.settings.groupId, topic, this.settings.consumerId, this.generation)).catch(() => undefined);
    }
    this.generation = -1;
  }

  private requireTopic(): string {
    if (this.topic === undefined) throw new Error("subscribe to a topic first");
    return this.topic;
  }
}
