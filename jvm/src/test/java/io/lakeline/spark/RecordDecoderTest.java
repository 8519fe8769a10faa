package io.lakeline.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The decoder's contract: every payload is either a typed row or a dead letter with the first reason that applies. */
class RecordDecoderTest {

    /** One field of a Spark StructType JSON. */
    private static String field(String name, String type, boolean nullable, String metadata) {
        return "{\"name\":\"" + name + "\",\"type\":" + type + ",\"nullable\":" + nullable + ",\"metadata\":"
                + metadata + "}";
    }

    private static String struct(String... fields) {
        return "{\"type\":\"struct\",\"fields\":[" + String.join(",", fields) + "]}";
    }

    private static RecordDecoder decoder(String schema, long maxBytes, String timeZone) {
        return new RecordDecoder("{\"schema\":" + schema + ",\"max_bytes\":" + maxBytes + ",\"time_zone\":\""
                + timeZone + "\"}");
    }

    private static final String ORDER = struct(
            field("id", "\"long\"", true, "{\"lakeline_required\":true}"),
            field("qty", "\"integer\"", true, "{}"),
            field("note", "\"string\"", true, "{}"),
            field("price", "\"decimal(5,2)\"", true, "{}"),
            field("paid", "\"boolean\"", true, "{}"),
            field("customer", struct(
                    field("name", "\"string\"", false, "{}"),
                    field("tier", "\"short\"", true, "{}")), true, "{}"),
            field("items", "{\"type\":\"array\",\"elementType\":" + struct(
                    field("sku", "\"string\"", false, "{}"),
                    field("n", "\"byte\"", true, "{}")) + ",\"containsNull\":true}", true, "{}"),
            field("attrs", "{\"type\":\"map\",\"keyType\":\"string\",\"valueType\":\"integer\","
                    + "\"valueContainsNull\":true}", true, "{}"),
            field("raw", "\"string\"", true, "{\"lakeline_json\":true}"),
            field("orderDate", "\"date\"", true, "{\"lakeline_json_name\":\"order-date\"}"),
            field("at", "\"timestamp\"", true, "{}"),
            field("local", "\"timestamp_ntz\"", true, "{}"),
            field("ms", "\"timestamp\"", true, "{\"lakeline_time_format\":\"epoch_millis\"}"),
            field("score", "\"double\"", true, "{}"),
            field("ratio", "\"float\"", true, "{}"),
            field("blob", "\"binary\"", true, "{}"),
            field("added", "\"integer\"", true, "{\"lakeline_evolved\":true}"));

    private static final RecordDecoder DECODER = decoder(ORDER, 10_000, "UTC");

    private static Row decode(String payload) {
        return DECODER.call(payload.getBytes(StandardCharsets.UTF_8));
    }

    private static Row record(Row result) {
        assertNull(result.get(2), () -> "expected a record, got " + result.get(2) + ": " + result.get(3));
        return result.getStruct(0);
    }

    private static void assertDeadLetter(Row result, String reason, String detailPart) {
        assertNull(result.get(0), "a dead letter has no record");
        assertNull(result.get(1), "a dead letter rescues nothing");
        assertEquals(reason, result.getString(2), () -> "detail: " + result.get(3));
        assertTrue(result.getString(3).contains(detailPart),
                () -> "detail '" + result.get(3) + "' does not name '" + detailPart + "'");
    }

    private static int index(String name) {
        String[] names = {"id", "qty", "note", "price", "paid", "customer", "items", "attrs", "raw", "orderDate",
                "at", "local", "ms", "score", "ratio", "blob", "added"};
        return List.of(names).indexOf(name);
    }

    @Test
    void decodesEveryDeclaredTypeOfAGoodRecord() {
        Row row = record(decode("{\"id\":7,\"qty\":2,\"note\":\"hi\",\"price\":\"12.5\",\"paid\":true,"
                + "\"customer\":{\"name\":\"ann\",\"tier\":3},\"items\":[{\"sku\":\"a\",\"n\":1},null],"
                + "\"attrs\":{\"k\":1,\"z\":null},\"raw\":{\"x\": [1, 2]},\"order-date\":\"2026-02-03\","
                + "\"at\":\"2026-01-02T03:04:05.5Z\",\"local\":\"2026-01-02 03:04:05\",\"ms\":1700000000123,"
                + "\"score\":1.25,\"ratio\":0.5,\"blob\":\"aGk=\",\"added\":4}"));
        assertEquals(7L, row.get(index("id")));
        assertEquals(2, row.get(index("qty")));
        assertEquals("hi", row.get(index("note")));
        assertEquals(new BigDecimal("12.50"), row.get(index("price")));
        assertEquals(true, row.get(index("paid")));
        Row customer = row.getStruct(index("customer"));
        assertEquals("ann", customer.get(0));
        assertEquals((short) 3, customer.get(1));
        List<?> items = (List<?>) row.get(index("items"));
        assertEquals(2, items.size());
        assertEquals("a", ((Row) items.get(0)).get(0));
        assertEquals((byte) 1, ((Row) items.get(0)).get(1));
        assertNull(items.get(1));
        Map<?, ?> attrs = (Map<?, ?>) row.get(index("attrs"));
        assertEquals(1, attrs.get("k"));
        assertTrue(attrs.containsKey("z") && attrs.get("z") == null);
        assertEquals("{\"x\": [1, 2]}", row.get(index("raw")), "a json field keeps the payload's own text");
        assertEquals(LocalDate.of(2026, 2, 3), row.get(index("orderDate")));
        assertEquals(Instant.parse("2026-01-02T03:04:05.5Z"), row.get(index("at")));
        assertEquals(LocalDateTime.of(2026, 1, 2, 3, 4, 5), row.get(index("local")));
        assertEquals(Instant.ofEpochMilli(1700000000123L), row.get(index("ms")));
        assertEquals(1.25, row.get(index("score")));
        assertEquals(0.5f, row.get(index("ratio")));
        assertArrayEquals("hi".getBytes(StandardCharsets.UTF_8), (byte[]) row.get(index("blob")));
        assertEquals(4, row.get(index("added")));
    }

    @Test
    void rescuesUndeclaredFieldsAsTheirOriginalJsonKeyedByPath() {
        Row result = decode("{\"id\":1,\"extra\":{\"a\": 1},\"customer\":{\"name\":\"b\",\"x.y\":true}}");
        assertEquals(1L, record(result).get(index("id")));
        assertEquals("{\"extra\":{\"a\": 1},\"customer.`x.y`\":true}", result.getString(1));
    }

    @Test
    void readsAFieldByItsJsonNameOnly() {
        Row result = decode("{\"id\":1,\"orderDate\":\"2026-01-01\"}");
        assertNull(record(result).get(index("orderDate")));
        assertEquals("{\"orderDate\":\"2026-01-01\"}", result.getString(1));
    }

    @Test
    void aRecordWithNothingUndeclaredRescuesNull() {
        assertNull(decode("{\"id\":1}").get(1));
    }

    @Test
    void refusesARepeatedDeclaredKey() {
        assertDeadLetter(decode("{\"id\":1,\"id\":2}"), "malformed_json", "repeated key: id");
    }

    @Test
    void refusesARepeatedUndeclaredKey() {
        assertDeadLetter(decode("{\"id\":1,\"x\":1,\"x\":1}"), "malformed_json", "repeated key: x");
    }

    @Test
    void refusesARepeatedKeyInANestedStructAndInAMap() {
        assertDeadLetter(decode("{\"id\":1,\"customer\":{\"name\":\"a\",\"name\":\"b\"}}"), "malformed_json",
                "repeated key: customer.name");
        assertDeadLetter(decode("{\"id\":1,\"attrs\":{\"k\":1,\"k\":2}}"), "malformed_json", "repeated key: attrs.k");
    }

    @ParameterizedTest
    @ValueSource(strings = {"{\"id\":1} x", "{\"id\":1}{\"id\":2}", "{\"id\":1}]"})
    void refusesTrailingContent(String payload) {
        assertDeadLetter(decode(payload), "malformed_json", "");
    }

    @Test
    void namesTheTrailingContentsOffset() {
        assertDeadLetter(decode("{\"id\":1} 2"), "malformed_json", "trailing content after the JSON object (at byte 9)");
    }

    @ParameterizedTest
    @ValueSource(strings = {"{\"id\":1,\"score\":NaN}", "{\"id\":1,\"score\":Infinity}", "{\"id\":1,\"qty\":01}",
            "{'id':1}", "{\"id\":1,/* c */\"qty\":1}", "{\"id\":1,", "{\"id\":1,\"items\":[1,"})
    void refusesWhatStrictJsonDoesNotAllow(String payload) {
        assertDeadLetter(decode(payload), "malformed_json", "invalid JSON");
    }

    @ParameterizedTest
    @ValueSource(strings = {"[{\"id\":1}]", "1", "\"id\"", "null"})
    void refusesAPayloadThatIsNotAnObject(String payload) {
        assertDeadLetter(decode(payload), "malformed_json", "not a JSON object");
    }

    @Test
    void refusesEmptyAndNullPayloads() {
        assertDeadLetter(decode(""), "malformed_json", "empty payload");
        assertDeadLetter(DECODER.call(null), "malformed_json", "null payload");
    }

    @Test
    void refusesAPayloadOverTheLimitBeforeReadingIt() {
        RecordDecoder small = decoder(ORDER, 10, "UTC");
        assertDeadLetter(small.call("{\"id\":12345}".getBytes(StandardCharsets.UTF_8)), "oversize",
                "payload is 12 bytes; limit is 10");
        RecordDecoder exact = decoder(ORDER, 12, "UTC");
        assertEquals(12345L, record(exact.call("{\"id\":12345}".getBytes(StandardCharsets.UTF_8))).get(0));
    }

    @Test
    void refusesInvalidUtf8AndNulBytes() {
        assertDeadLetter(DECODER.call(new byte[] {'{', '"', 'i', 'd', '"', ':', '"', (byte) 0xff, '"', '}'}),
                "invalid_utf8", "not valid UTF-8");
        assertDeadLetter(DECODER.call("{\"id\":1}".getBytes(StandardCharsets.UTF_16LE)), "invalid_utf8", "NUL");
        assertEquals("é", record(decode("{\"id\":1,\"note\":\"é\"}")).get(index("note")));
    }

    @Test
    void refusesAMissingOrNullRequiredTopLevelField() {
        assertDeadLetter(decode("{\"qty\":1}"), "missing_required_field", "missing: id");
        assertDeadLetter(decode("{\"id\":null}"), "missing_required_field", "missing: id");
    }

    @Test
    void refusesAMissingNonNullableNestedFieldWithItsPath() {
        assertDeadLetter(decode("{\"id\":1,\"customer\":{\"tier\":1}}"), "missing_required_field",
                "missing: customer.name");
        assertDeadLetter(decode("{\"id\":1,\"items\":[{\"sku\":\"a\"},{\"n\":2}]}"), "missing_required_field",
                "missing: items[1].sku");
    }

    @Test
    void anAbsentOptionalStructIsNull() {
        assertNull(record(decode("{\"id\":1}")).get(index("customer")));
    }

    @Test
    void namesEveryMismatchWithItsRawValue() {
        assertDeadLetter(decode("{\"id\":\"7\",\"paid\":1,\"customer\":[]}"), "type_mismatch",
                "wrong type for: id, paid, customer (raw: {\"id\":\"7\",\"paid\":1,\"customer\":[]})");
    }

    @Test
    void aMismatchOutranksNoOtherReasonButMissing() {
        assertDeadLetter(decode("{\"qty\":\"x\"}"), "missing_required_field", "missing: id");
    }

    @ParameterizedTest
    @ValueSource(strings = {"{\"id\":1,\"qty\":2147483648}", "{\"id\":1,\"qty\":1.5}", "{\"id\":1,\"qty\":1e2}",
            "{\"id\":1,\"qty\":true}", "{\"id\":9223372036854775808}",
            "{\"id\":1,\"customer\":{\"name\":\"a\",\"tier\":32768}}",
            "{\"id\":1,\"items\":[{\"sku\":\"a\",\"n\":128}]}"})
    void refusesIntegersThatAreNotIntegersOrDoNotFit(String payload) {
        assertDeadLetter(decode(payload), "type_mismatch", "wrong type for");
    }

    @Test
    void takesTheExtremesOfEachIntegerType() {
        Row row = record(decode("{\"id\":-9223372036854775808,\"qty\":2147483647,"
                + "\"customer\":{\"name\":\"a\",\"tier\":-32768},\"items\":[{\"sku\":\"a\",\"n\":127}]}"));
        assertEquals(Long.MIN_VALUE, row.get(index("id")));
        assertEquals(Integer.MAX_VALUE, row.get(index("qty")));
        assertEquals(Short.MIN_VALUE, row.getStruct(index("customer")).get(1));
    }

    @Test
    void readsScalarsAsStringsButNeverObjectsOrArrays() {
        assertEquals("42", record(decode("{\"id\":1,\"note\":42}")).get(index("note")));
        assertEquals("1.50", record(decode("{\"id\":1,\"note\":1.50}")).get(index("note")));
        assertEquals("false", record(decode("{\"id\":1,\"note\":false}")).get(index("note")));
        assertDeadLetter(decode("{\"id\":1,\"note\":{\"a\":1}}"), "type_mismatch", "note (raw: {\"note\":{\"a\":1}})");
        assertDeadLetter(decode("{\"id\":1,\"note\":[1]}"), "type_mismatch", "note");
    }

    @ParameterizedTest
    @ValueSource(strings = {"12.345", "\"12.345\"", "1234", "\"1e3\"", "\"abc\"", "true", "1e300000000"})
    void refusesDecimalsThatWouldRoundOrOverflow(String price) {
        assertDeadLetter(decode("{\"id\":1,\"price\":" + price + "}"), "type_mismatch", "price");
    }

    @Test
    void takesDecimalsThatFitExactly() {
        assertEquals(new BigDecimal("999.99"), record(decode("{\"id\":1,\"price\":999.99}")).get(index("price")));
        assertEquals(new BigDecimal("120.00"), record(decode("{\"id\":1,\"price\":1.2e2}")).get(index("price")));
        assertEquals(new BigDecimal("0.00"), record(decode("{\"id\":1,\"price\":\" 0 \"}")).get(index("price")));
    }

    @ParameterizedTest
    @ValueSource(strings = {"\"ratio\":1e39", "\"ratio\":1e-50", "\"score\":1e309", "\"score\":1e-400",
            "\"score\":\"1.5\""})
    void refusesFloatingNumbersThatOverflowOrUnderflow(String pair) {
        assertDeadLetter(decode("{\"id\":1," + pair + "}"), "type_mismatch", "wrong type for");
    }

    @Test
    void takesAZeroWrittenAsZero() {
        assertEquals(0.0, record(decode("{\"id\":1,\"score\":0e-400}")).get(index("score")));
    }

    @Test
    void namesMismatchesInsideArraysAndMapsByElement() {
        assertDeadLetter(decode("{\"id\":1,\"items\":[{\"sku\":\"a\"},{\"sku\":\"b\",\"n\":\"x\"}]}"), "type_mismatch",
                "wrong type for: items[1].n (raw: {\"items[1].n\":\"x\"})");
        assertDeadLetter(decode("{\"id\":1,\"attrs\":{\"k\":\"v\"}}"), "type_mismatch", "attrs.k");
        assertDeadLetter(decode("{\"id\":1,\"items\":{\"sku\":\"a\"}}"), "type_mismatch", "items");
    }

    @ParameterizedTest
    @ValueSource(strings = {"\"at\":\"yesterday\"", "\"at\":1.5", "\"at\":true", "\"ms\":1.0001",
            "\"ms\":\"2026-01-01T00:00:00Z\"", "\"order-date\":1", "\"order-date\":\"not a date\"",
            "\"at\":1e30"})
    void refusesTimesThatDoNotParseExactly(String pair) {
        assertDeadLetter(decode("{\"id\":1," + pair + "}"), "type_mismatch", "wrong type for");
    }

    @Test
    void readsAnIntegerTimestampAsEpochSecondsAndAZonelessOneInTheSessionZone() {
        assertEquals(Instant.ofEpochSecond(1700000000L), record(decode("{\"id\":1,\"at\":1700000000}")).get(index("at")));
        Row berlin = record(decoder(ORDER, 10_000, "Europe/Berlin")
                .call("{\"id\":1,\"at\":\"2026-01-02T03:04:05\"}".getBytes(StandardCharsets.UTF_8)));
        assertEquals(Instant.parse("2026-01-02T02:04:05Z"), berlin.get(index("at")));
    }

    @Test
    void readsBase64StandardOrUrlSafeAndRefusesAnythingElse() {
        assertArrayEquals(new byte[] {(byte) 0xfb, (byte) 0xff},
                (byte[]) record(decode("{\"id\":1,\"blob\":\"-_8=\"}")).get(index("blob")));
        assertDeadLetter(decode("{\"id\":1,\"blob\":\"not base64!\"}"), "type_mismatch", "blob");
    }

    @Test
    void aFieldSchemaEvolutionAddedReportsASchemaViolationNotAMismatch() {
        assertDeadLetter(decode("{\"id\":1,\"added\":\"x\"}"), "schema_violation",
                "does not fit the column schema evolution added: added (raw: {\"added\":\"x\"})");
        assertDeadLetter(decode("{\"id\":1,\"qty\":\"y\",\"added\":\"x\"}"), "type_mismatch", "qty");
    }

    private static final RecordDecoder RESCUING = new RecordDecoder("{\"schema\":" + ORDER
            + ",\"max_bytes\":10000,\"time_zone\":\"UTC\",\"on_conflict\":\"rescue\"}");

    private static Row rescue(String payload) {
        return RESCUING.call(payload.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void rescuesAValueThatDoesNotFitUnderItsPathAndNullsTheField() {
        Row result = rescue("{\"id\":1,\"qty\":\"two\",\"customer\":{\"name\":\"a\",\"tier\":\"gold\"},"
                + "\"items\":[{\"sku\":\"a\",\"n\":1},{\"sku\":\"b\",\"n\":\"x\"}],\"attrs\":{\"k\":\"v\",\"j\":2},"
                + "\"extra\":true,\"note\":\"kept\"}");
        Row row = record(result);
        assertEquals(1L, row.get(index("id")));
        assertNull(row.get(index("qty")));
        assertEquals("kept", row.get(index("note")));
        assertEquals("a", row.getStruct(index("customer")).get(0));
        assertNull(row.getStruct(index("customer")).get(1));
        List<?> items = (List<?>) row.get(index("items"));
        assertEquals((byte) 1, ((Row) items.get(0)).get(1));
        assertEquals("b", ((Row) items.get(1)).get(0));
        assertNull(((Row) items.get(1)).get(1));
        Map<?, ?> attrs = (Map<?, ?>) row.get(index("attrs"));
        assertTrue(attrs.containsKey("k") && attrs.get("k") == null);
        assertEquals(2, attrs.get("j"));
        assertEquals("{\"qty\":\"two\",\"customer.tier\":\"gold\",\"items[1].n\":\"x\",\"attrs.k\":\"v\","
                + "\"extra\":true}", result.getString(1));
        assertEquals(List.of("attrs[]", "customer.tier", "items[].n", "qty"), (List<?>) result.get(4));
        assertEquals(true, result.get(5));
    }

    @Test
    void rescuesAWrongKindOfStructOrArrayWhole() {
        Row result = rescue("{\"id\":1,\"customer\":\"ann\",\"items\":{\"sku\":\"a\"},\"price\":1.234}");
        Row row = record(result);
        assertNull(row.get(index("customer")));
        assertNull(row.get(index("items")));
        assertNull(row.get(index("price")));
        assertEquals("{\"customer\":\"ann\",\"items\":{\"sku\":\"a\"},\"price\":1.234}", result.getString(1));
        assertEquals(List.of("customer", "items", "price"), (List<?>) result.get(4));
        assertEquals(false, result.get(5), "nothing undeclared");
    }

    @Test
    void rescuesAnElementOfAnArrayOfScalars() {
        RecordDecoder tags = new RecordDecoder("{\"schema\":" + struct(field("tags", "{\"type\":\"array\","
                + "\"elementType\":\"integer\",\"containsNull\":true}", true, "{}")) + ",\"max_bytes\":100,"
                + "\"time_zone\":\"UTC\",\"on_conflict\":\"rescue\"}");
        Row result = tags.call("{\"tags\":[1,\"x\",3,[4]]}".getBytes(StandardCharsets.UTF_8));
        assertEquals(java.util.Arrays.asList(1, null, 3, null), (List<?>) record(result).get(0));
        assertEquals("{\"tags[1]\":\"x\",\"tags[3]\":[4]}", result.getString(1));
        assertEquals(List.of("tags[]"), (List<?>) result.get(4));
    }

    @Test
    void aRequiredOrNotNullFieldThatDoesNotFitIsStillADeadLetter() {
        assertDeadLetter(rescue("{\"id\":\"7\",\"qty\":\"x\"}"), "type_mismatch", "wrong type for: id (raw: {\"id\":\"7\"})");
        assertDeadLetter(rescue("{\"id\":1,\"customer\":{\"name\":[1]}}"), "type_mismatch", "customer.name");
        assertDeadLetter(rescue("{\"id\":1,\"items\":[{\"sku\":{}}]}"), "type_mismatch", "items[0].sku");
    }

    @Test
    void rescuesAValueThatDoesNotFitAFieldSchemaEvolutionAdded() {
        Row result = rescue("{\"id\":1,\"added\":\"x\"}");
        assertNull(record(result).get(index("added")));
        assertEquals("{\"added\":\"x\"}", result.getString(1));
        assertEquals(List.of("added"), (List<?>) result.get(4));
    }

    @Test
    void aConflictWhosePathIsAlsoAnUndeclaredKeyIsADeadLetterNeverALoss() {
        // `orderDate` is read from `order-date`: its rescued path would be the same as the undeclared key's.
        assertDeadLetter(rescue("{\"id\":1,\"order-date\":5,\"orderDate\":\"x\"}"), "type_mismatch", "orderDate");
        assertDeadLetter(rescue("{\"id\":1,\"orderDate\":\"x\",\"order-date\":5}"), "type_mismatch", "orderDate");
    }

    @Test
    void aRecordWithoutConflictsHasNoConflictList() {
        Row clean = rescue("{\"id\":1,\"extra\":2}");
        assertEquals("{\"extra\":2}", clean.getString(1));
        assertNull(clean.get(4));
        assertEquals(true, clean.get(5));
        Row strict = decode("{\"id\":1,\"qty\":1}");
        assertNull(strict.get(1));
        assertNull(strict.get(4));
        assertEquals(false, strict.get(5));
    }

    @Test
    void refusesAnUnknownConflictRule() {
        assertThrows(IllegalArgumentException.class, () -> new RecordDecoder("{\"schema\":" + ORDER
                + ",\"max_bytes\":1,\"time_zone\":\"UTC\",\"on_conflict\":\"drop\"}"));
    }

    @Test
    void refusesAnUnsupportedTypeWhenConstructed() {
        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> decoder(struct(field("v", "\"void\"", true, "{}")), 10, "UTC"));
        assertTrue(error.getMessage().contains("unsupported type void at v"), error.getMessage());
    }

    @Test
    void refusesASpecThatIsNotJson() {
        assertThrows(java.io.UncheckedIOException.class, () -> new RecordDecoder("{schema"));
    }

    @Test
    void survivesJavaSerializationAsSparkShipsItToExecutors() throws Exception {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        try (java.io.ObjectOutputStream out = new java.io.ObjectOutputStream(bytes)) {
            out.writeObject(DECODER);
        }
        RecordDecoder copy;
        try (java.io.ObjectInputStream in = new java.io.ObjectInputStream(
                new java.io.ByteArrayInputStream(bytes.toByteArray()))) {
            copy = (RecordDecoder) in.readObject();
        }
        assertEquals(5L, record(copy.call("{\"id\":5}".getBytes(StandardCharsets.UTF_8))).get(0));
        assertDeadLetter(copy.call("{\"id\":5,\"id\":5}".getBytes(StandardCharsets.UTF_8)), "malformed_json",
                "repeated key");
    }

    /** The fast path for `yyyy-MM-ddTHH:mm:ss[.f]Z` gives Spark's own answer, and leaves every other form to Spark. */
    @ParameterizedTest
    @ValueSource(strings = {"2026-11-28T12:34:56Z", "2026-11-28T12:34:56.1Z", "2026-11-28T12:34:56.123Z",
            "2026-11-28T12:34:56.123456Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z",
            "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "2024-02-29T00:00:00Z", "1582-10-10T10:10:10Z",
            "2000-02-29T23:59:59.5Z"})
    void readsUtcTimestampsAsSparkDoes(String value) {
        Long spark = (Long) DateTimeUtils.stringToTimestamp(UTF8String.fromString(value),
                java.time.ZoneOffset.UTC).get();
        assertEquals(spark, RecordDecoder.TimestampReader.utcMicros(value));
    }

    @ParameterizedTest
    @ValueSource(strings = {"2026-11-28T12:34:56", "2026-11-28 12:34:56Z", "2026-11-28T12:34:56.Z",
            "2026-11-28T12:34:56.1234567Z", "2026-11-28T12:34:56+00:00", "2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
            "2026-11-31T00:00:00Z", "2026-11-28T24:00:00Z", "2026-11-28T12:60:00Z", "2026-11-28T12:00:60Z",
            "0000-01-01T00:00:00Z", " 2026-11-28T12:34:56Z", "2026-11-28T12:34:56z", "2026-1a-28T12:34:56Z",
            "+2026-11-28T12:34:56Z", "2026-11-28"})
    void leavesOtherFormsToSpark(String value) {
        assertNull(RecordDecoder.TimestampReader.utcMicros(value));
    }

    @Test
    void readsRandomUtcTimestampsAsSparkDoes() {
        java.util.Random random = new java.util.Random(7);
        for (int i = 0; i < 20_000; i++) {
            String value = String.format("%04d-%02d-%02dT%02d:%02d:%02d", 1 + random.nextInt(9999),
                    1 + random.nextInt(12), 1 + random.nextInt(31), random.nextInt(24), random.nextInt(60),
                    random.nextInt(60));
            int digits = random.nextInt(7);
            if (digits > 0) {
                value += "." + String.format("%06d", random.nextInt(1_000_000)).substring(0, digits);
            }
            value += "Z";
            scala.Option<Object> spark = DateTimeUtils.stringToTimestamp(UTF8String.fromString(value),
                    java.time.ZoneOffset.UTC);
            Long fast = RecordDecoder.TimestampReader.utcMicros(value);
            if (fast != null) {
                assertEquals(spark.get(), fast, value);
            } else {  // only impossible dates (day 29-31 past the month's end) leave the fast path
                assertTrue(spark.isEmpty(), value);
            }
        }
    }
}
