// FLUXClient: a pipelined connection speaking the FLUX V1 line protocol (docs/v1-protocol.md),
// one method per command. Commands may be awaited concurrently: the broker answers in request
// order and the answers are matched to the requests in that order.
import { createConnection, Socket } from "net";

export class FLUXProtocolError extends Error {
  readonly code: string;
  readonly response: string;

  constructor(code: string, message: string, response: string) {
    super(`${code}: ${message}`);
    this.name = "FLUXProtocolError";
    this.code = code;
    this.message = message;
    this.response = response;
  }

  /** For NOT_LEADER: the host:port the broker named, if it did. */
  get leaderAddress(): string | undefined {
    if (this.code !== "NOT_LEADER" || !this.message.includes(" at ")) return undefined;
    const address = this.message.slice(this.message.lastIndexOf(" at ") + 4).trim();
    return address.includes(":") && !address.includes(" ") ? address : undefined;
  }
}

export type Fields = Record<string, string>;
export interface Produced { partition: number; offset: number; hw: number }
export interface Assignment { generation: number; assigned: number[] }
export interface Metadata {
  brokers: Map<number, string>;
  topics: Map<string, number>;
  leaders: Map<string, number>; // "topic/partition" -> leader id
}

export function parseAnswer(line: string, correlationId: string): Fields {
  const parts = line.split("|");
  if (parts.length < 3 || parts[0] !== "V1") {
    throw new FLUXProtocolError("BAD_REQUEST", `not a V1 answer: ${line.slice(0, 80)}`, line);
  }
  if (parts[2] === "ERR") {
    throw new FLUXProtocolError(parts[3] ?? "BAD_REQUEST", parts.slice(4).join("|"), line);
  }
  if (parts[1] !== correlationId) {
    throw new Error(`answer ${parts[1]} to request ${correlationId}: out of step`);
  }
  const fields: Fields = {};
  const body = parts.slice(3).join("|");
  for (const item of body.split(" ")) {
    const at = item.indexOf("=");
    if (at > 0) fields[item.slice(0, at)] = item.slice(at + 1);
  }
  return fields;
}

function records(text: string): Array<[number, string]> {
  return text.split(",").filter((item) => item).map((item) => {
    const at = item.indexOf(":");
    return [Number(item.slice(0, at)), decodeURIComponent(item.slice(at + 1))];
  });
}

function assigned(text: string): number[] {
  return text.replace(/[[\]]/g, "").split(",").filter((p) => p).map(Number);
}

export class FLUXClient {
  readonly host: string;
  readonly port: number;
  private socket: Socket | undefined;
  private buffer = "";
  private waiting: Array<{ id: string; resolve: (f: Fields) => void; reject: (e: Error) => void }> = [];
  private nextId = 1;

  constructor(address: string) {
    const at = address.lastIndexOf(":");
    this.host = address.slice(0, at) || "127.0.0.1";
    this.port = Number(address.slice(at + 1));
  }

  get address(): string { return `${this.host}:${this.port}`; }

  connect(): Promise<void> {
    return new Promise((resolve, reject) => {
      // Settled once: open, failed, or closed (close() while connecting, by another caller
      // of a shared client, emits no error: without this the promise would never settle).
      let settled = false;
      const settle = (error?: Error) => {
        if (settled) return;
        settled = true;
        if (error === undefined) resolve();
        else reject(error);
      };
      const socket = createConnection(this.port, this.host, () => settle());
      socket.setEncoding("utf8");
      socket.setNoDelay(true);
      socket.on("data", (chunk: string) => this.received(chunk));
      socket.on("close", () => {
        const error = new Error(`${this.address} closed the connection`);
        settle(error);
        this.fail(error);
      });
      socket.on("error", (error: Error) => {
        settle(error);
        this.fail(error);
      });
      this.socket = socket;
    });
  }

  close(): void {
    this.socket?.end();
    this.socket?.destroy();
    this.socket = undefined;
    this.fail(new Error("closed"));
  }

  sendCommand(command: string, args: Array<string | number> = []): Promise<Fields> {
    const socket = this.socket;
    if (socket === undefined || socket.destroyed) return Promise.reject(new Error("not connected"));
    const id = String(this.nextId++);
    return new Promise((resolve, reject) => {
      this.waiting.push({ id, resolve, reject });
      socket.write(`V1|${id}|${command}|${args.join(" ")}\n`);
    });
  }

  private received(chunk: string): void {
    this.buffer += chunk;
    let end: number;
    while ((end = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 1);
      const pending = this.waiting.shift();
      if (pending === undefined) continue;
      try {
        pending.resolve(parseAnswer(line, pending.id));
      } catch (error) {
        pending.reject(error as Error);
      }
    }
  }

  private fail(error: Error): void {
    for (const pending of this.waiting.splice(0)) pending.reject(error);
  }

  async produce(topic: string, key: string, value: string, acks: "0" | "1" | "all" = "all"): Promise<Produced> {
    if (/\s/.test(key + value) || key.includes(":")) {
      throw new Error("V1 keys and values hold no whitespace, and keys no ':'");
    }
    const f = await this.sendCommand("PRODUCE", [topic, `${key}:${value}`, `acks=${acks}`]);
    return { partition: Number(f.partition), offset: Number(f.offset), hw: Number(f.hw) };
  }

  async consume(topic: string, partition: number, offset: number, max?: number): Promise<{ messages: Array<[number, string]>; hw: number }> {
    const args: Array<string | number> = [topic, partition, offset];
    if (max !== undefined) args.push(max);
    const f = await this.sendCommand("CONSUME", args);
    return { messages: records(f.messages ?? ""), hw: Number(f.hw) };
  }

  async join(group: string, topic: string, consumerId: string, assignor = "range"): Promise<Assignment> {
    const f = await this.sendCommand("JOIN", [group, topic, consumerId, `assignor=${assignor}`]);
    return { generation: Number(f.generation), assigned: assigned(f.assigned ?? "") };
  }

  async sync(group: string, topic: string, consumerId: string, generation: number): Promise<Assignment> {
    const f = await this.sendCommand("SYNC", [group, topic, consumerId, generation]);
    return { generation: Number(f.generation), assigned: assigned(f.assigned ?? "") };
  }

  async heartbeat(group: string, topic: string, consumerId: string, generation: number): Promise<void> {
    await this.sendCommand("HEARTBEAT", [group, topic, consumerId, generation]);
  }

  async leave(group: string, topic: string, consumerId: string, generation: number): Promise<void> {
    await this.sendCommand("LEAVE", [group, topic, consumerId, generation]);
  }

  async commit(group: string, topic: string, consumerId: string, generation: number, partition: number, offset: number): Promise<boolean> {
    const f = await this.sendCommand("COMMIT", [group, topic, consumerId, generation, partition, offset]);
    return f.committed === "true";
  }

  async offset(group: string, topic: string, partition: number): Promise<number> {
    return Number((await this.sendCommand("OFFSET", [group, topic, partition])).offset);
  }

  async adminCreateTopic(topic: string, partitions: number, replicationFactor: number): Promise<Fields> {
    return this.sendCommand("ADMIN_CREATE_TOPIC", [topic, partitions, replicationFactor]);
  }

  async adminGetMetadata(): Promise<Metadata> {
    const f = await this.sendCommand("ADMIN_GET_METADATA");
    const metadata: Metadata = { brokers: new Map(), topics: new Map(), leaders: new Map() };
    for (const entry of (f.brokers ?? "").split(",").filter((e) => e)) {
      const [id, address] = entry.split("@");
      metadata.brokers.set(Number(id), address);
    }
    for (const entry of (f.topics ?? "").split(",").filter((e) => e)) {
      const at = entry.lastIndexOf(":");
      metadata.topics.set(entry.slice(0, at), Number(entry.slice(at + 1)));
    }
    for (const entry of (f.leaders ?? "").split(",").filter((e) => e)) {
      const at = entry.lastIndexOf("=");
      metadata.leaders.set(entry.slice(0, at), Number(entry.slice(at + 1)));
    }
    return metadata;
  }

  async brokerFetch(topic: string, partition: number, follower: number, offset: number, max?: number): Promise<{ records: Array<[number, string]>; hw: number }> {
    const args: Array<string | number> = [topic, partition, follower, offset];
    if (max !== undefined) args.push(max);
    const f = await this.sendCommand("BROKER_FETCH", args);
    return { records: records(f.records ?? ""), hw: Number(f.hw) };
  }

  async replicaFetch(topic: string, partition: number, replica: number, offset: number): Promise<{ records: Array<[number, string]>; hw: number }> {
    const f = await this.sendCommand("REPLICA_FETCH", [topic, partition, replica, offset]);
    return { records: records(f.records ?? ""), hw: Number(f.hw) };
  }
}
