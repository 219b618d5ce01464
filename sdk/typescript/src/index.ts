// TypeScript SDK of the FLUX V1 line protocol (docs/v1-protocol.md).
export { FLUXClient, FLUXProtocolError, parseAnswer } from "./client";
export type { Assignment, Fields, Metadata, Produced } from "./client";
export { FLUXConsumer, FLUXProducer, FLUXRuntime, fnv1a32 } from "./runtime";
export type { ConsumedMessage, ConsumerSettings, Message, ProducerSettings } from "./runtime";
