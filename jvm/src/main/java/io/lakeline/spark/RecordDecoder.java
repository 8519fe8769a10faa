package io.lakeline.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.Year;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * Lakeline's record decoder: one strict JSON pass over a raw payload against the declared record type, nested to any
 * depth. It returns {@code struct<record, rescued, error, detail, conflicts, undeclared>}: for a good record, the
 * typed record and {@code rescued}, one JSON object of original JSON values keyed by path (the undeclared fields and,
 * when conflicts are rescued, the values that did not fit their field); {@code conflicts}, the fields whose value was
 * rescued (sorted, array indexes and map keys as {@code []}, e.g. {@code items[].qty}; null when none); and
 * {@code undeclared}, whether {@code rescued} holds an undeclared field. For any other payload: the dead-letter reason
 * and a detail naming the fields. It never throws for a payload: whatever a payload holds, it is either a row or a
 * dead letter.
 *
 * <p>Reasons, the first that applies: {@code malformed_json} for a null payload, {@code oversize}, {@code invalid_utf8}
 * (not UTF-8, or NUL bytes), {@code malformed_json} (not one JSON object, trailing content, a repeated key),
 * {@code missing_required_field} (a required field absent or null, top level or nested), {@code type_mismatch} (a
 * value that does not fit its declared type without loss), {@code schema_violation} (add mode: a value that does not
 * fit a column schema evolution added).
 *
 * <p>With {@code "on_conflict": "rescue"} (Auto Loader's rescued data column), a value that does not fit a field that
 * may be null makes that field null and goes to {@code rescued} under the field's path (e.g.
 * {@code installation.created_at}, {@code items[2].qty}, {@code attrs.size}); the record is a row. Only a required
 * field (top-level {@code required}, nested NOT NULL) still makes the record a {@code type_mismatch} dead letter, as
 * does a conflict whose path is also an undeclared key of the record (one of the two values would be lost). With
 * {@code "dead_letter"} (the default), every such value makes the record a dead letter.
 *
 * <p>Conversions are strict: integers must be JSON integers within range; float and double refuse numbers that
 * overflow or underflow to zero; decimals refuse digits beyond the scale or precision (from a JSON number or a
 * string holding one); strings take JSON strings, numbers and booleans (as their JSON text) but never an object or
 * array (declare the field {@code json} to keep one as text); binary is base64; timestamps are ISO 8601 (a string
 * without a zone is read in the session time zone, an integer as epoch seconds) or, with the field's
 * {@code lakeline_time_format}, epoch seconds, milliseconds or microseconds as numbers.
 *
 * <p>The spec is JSON: {"schema": a Spark StructType as JSON (field metadata: lakeline_json_name, lakeline_required,
 * lakeline_json, lakeline_time_format), "max_bytes": N, "time_zone": "UTC", "on_conflict": "rescue"|"dead_letter"}.
 */
public final class RecordDecoder implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    static final String MALFORMED = "malformed_json", OVERSIZE = "oversize", INVALID_UTF8 = "invalid_utf8",
            MISSING = "missing_required_field", MISMATCH = "type_mismatch", VIOLATION = "schema_violation";

    private final String schemaJson;
    private final long maxBytes;
    private final String timeZone;
    private final boolean rescueConflicts;

    private transient JsonFactory factory;
    private transient StructReader root;

    public RecordDecoder(String spec) {
        JsonNode node;
        try {
            node = new ObjectMapper().readTree(spec);
        } catch (IOException e) {
            throw new UncheckedIOException("RecordDecoder: spec is not JSON: " + spec, e);
        }
        schemaJson = node.get("schema").toString();
        maxBytes = node.get("max_bytes").asLong();
        timeZone = node.get("time_zone").asText();
        JsonNode onConflict = node.get("on_conflict");
        String conflicts = onConflict == null ? "dead_letter" : onConflict.asText();
        if (!conflicts.equals("rescue") && !conflicts.equals("dead_letter")) {
            throw new IllegalArgumentException("RecordDecoder: on_conflict must be rescue or dead_letter: " + spec);
        }
        rescueConflicts = conflicts.equals("rescue");
        build();  // refuse a type or zone it cannot read here, on the driver, rather than in a task
    }

    private void build() {
        factory = new JsonFactory();  // strict: no comments, no NaN, no leading zeros, no single quotes
        StructType schema = (StructType) DataType.fromJson(schemaJson);
        root = new StructReader(schema, "", DateTimeUtils.getZoneId(timeZone), true);
    }

    @Override
    public Row call(byte[] raw) {
        if (factory == null) {
            build();
        }
        if (raw == null) {
            return failed(MALFORMED, "null payload");
        }
        if (raw.length > maxBytes) {
            return failed(OVERSIZE, "payload is " + raw.length + " bytes; limit is " + maxBytes);
        }
        if (!validUtf8(raw)) {
            return failed(INVALID_UTF8, "payload is not valid UTF-8 (or holds NUL bytes: UTF-16/32?)");
        }
        Context ctx = new Context(raw, rescueConflicts);
        Row record;
        try (JsonParser parser = factory.createParser(raw)) {
            JsonToken first = parser.nextToken();
            if (first != JsonToken.START_OBJECT) {
                return failed(MALFORMED, first == null ? "empty payload" : "not a JSON object");
            }
            record = (Row) root.readObject(parser, ctx, "");
            if (ctx.malformed != null) {
                return failed(MALFORMED, ctx.malformed);
            }
            if (parser.nextToken() != null) {
                return failed(MALFORMED, "trailing content after the JSON object (at byte "
                        + parser.currentTokenLocation().getByteOffset() + ")");
            }
        } catch (IOException | RuntimeException e) {
            String message = String.valueOf(e.getMessage()).split("\n", 2)[0];
            return failed(MALFORMED, "invalid JSON: " + message);
        }
        if (!ctx.missing.isEmpty()) {
            return failed(MISSING, "missing: " + String.join(", ", ctx.missing));
        }
        if (!ctx.mismatched.isEmpty()) {
            return failed(MISMATCH, "wrong type for: " + String.join(", ", ctx.mismatched.keySet()) + " (raw: "
                    + jsonObject(ctx.mismatched) + ")");
        }
        if (!ctx.violations.isEmpty()) {
            return failed(VIOLATION, "does not fit the column schema evolution added: "
                    + String.join(", ", ctx.violations.keySet()) + " (raw: " + jsonObject(ctx.violations) + ")");
        }
        return RowFactory.create(record, ctx.rescued.isEmpty() ? null : jsonObject(ctx.rescued), null, null,
                ctx.conflictFields == null ? null : new ArrayList<>(ctx.conflictFields), ctx.undeclared);
    }

    private static Row failed(String reason, String detail) {
        return RowFactory.create(null, null, reason, detail, null, null);
    }

    static boolean validUtf8(byte[] raw) {
        boolean ascii = true;
        for (byte b : raw) {
            if (b == 0) {
                return false;  // a NUL byte: UTF-16/32 text (Jackson would auto-detect it), never UTF-8 JSON
            }
            ascii &= b >= 0;
        }
        return ascii || UTF8String.fromBytes(raw).isValid();  // Spark's own check (is_valid_utf8)
    }

    /** {"k": <raw JSON>, ...} from already-serialized JSON values. */
    private static String jsonObject(Map<String, String> values) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, String> entry : values.entrySet()) {
            if (out.length() > 1) {
                out.append(',');
            }
            out.append(quoted(entry.getKey())).append(':').append(entry.getValue());
        }
        return out.append('}').toString();
    }

    private static String quoted(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** What one record's pass found besides its values. */
    static final class Context {
        final byte[] raw;
        final boolean rescueConflicts;
        final List<String> missing = new ArrayList<>();
        final Map<String, String> mismatched = new LinkedHashMap<>();
        final Map<String, String> rescued = new LinkedHashMap<>();
        final Map<String, String> violations = new LinkedHashMap<>();
        String malformed;
        boolean undeclared;
        TreeSet<String> conflictPaths, conflictFields;  // null until a conflict is rescued (the rare case)

        Context(byte[] raw, boolean rescueConflicts) {
            this.raw = raw;
            this.rescueConflicts = rescueConflicts;
        }

        /** An undeclared key's value. A conflict rescued under the same path goes back to the mismatches. */
        void rescueUndeclared(String path, String value) {
            undeclared = true;
            String conflict = rescued.put(path, value);
            if (conflict != null && conflictPaths != null && conflictPaths.remove(path)) {
                mismatched.put(path, conflict);
            }
        }

        /** The value at `path` (of a field that may be null) rescued if it did not fit: conflicts are being rescued
         * and the path is free in `rescued`. `field` is the path without array indexes and map keys. */
        void settle(String path, String field) {
            if (!rescueConflicts || mismatched.isEmpty() || rescued.containsKey(path)) {
                return;
            }
            String value = mismatched.remove(path);
            if (value == null) {
                return;
            }
            rescued.put(path, value);
            if (conflictPaths == null) {
                conflictPaths = new TreeSet<>();
                conflictFields = new TreeSet<>();
            }
            conflictPaths.add(path);
            conflictFields.add(field);
        }

        /** The value at the parser (a scalar, or a whole object/array) exactly as the payload wrote it; the parser
         * moves to its last token. */
        String copy(JsonParser parser) throws IOException {
            int start = (int) parser.currentTokenLocation().getByteOffset();
            parser.skipChildren();
            parser.finishToken();  // a string is read lazily: its end is known only once it is read
            int end = (int) parser.currentLocation().getByteOffset();
            return new String(raw, start, end - start, StandardCharsets.UTF_8);
        }

        /** The mismatches recorded after the first `keep` become schema violations. */
        void moveNewestMismatches(int keep) {
            List<String> paths = new ArrayList<>(mismatched.keySet());
            for (String path : paths.subList(keep, paths.size())) {
                violations.put(path, mismatched.remove(path));
            }
        }

        Object mismatch(String path, JsonParser parser) throws IOException {
            mismatched.putIfAbsent(path, copy(parser));
            return null;
        }
    }

    /** Reads one JSON value (the parser at its first token) as one Spark type. */
    abstract static class Reader {
        abstract Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException;

        static Reader of(DataType type, Metadata metadata, String path, ZoneId zone, String timeFormat) {
            if (metadata != null && metadata.contains("lakeline_json") && metadata.getBoolean("lakeline_json")) {
                return new JsonTextReader();
            }
            if (metadata != null && metadata.contains("lakeline_time_format")) {
                timeFormat = metadata.getString("lakeline_time_format");
            }
            if (type instanceof StructType) {
                return new StructReader((StructType) type, path, zone, false, timeFormat);
            }
            if (type instanceof ArrayType) {
                return new ArrayReader(of(((ArrayType) type).elementType(), null, path + "[]", zone, timeFormat),
                        path + "[]");
            }
            if (type instanceof MapType) {
                return new MapReader(of(((MapType) type).valueType(), null, path + "[]", zone, timeFormat),
                        path + "[]");
            }
            if (type instanceof StringType) {
                return new StringReader();
            }
            if (type instanceof BooleanType) {
                return new BooleanReader();
            }
            if (type instanceof ByteType) {
                return new IntegralReader(Byte.MIN_VALUE, Byte.MAX_VALUE, 'b');
            }
            if (type instanceof ShortType) {
                return new IntegralReader(Short.MIN_VALUE, Short.MAX_VALUE, 's');
            }
            if (type instanceof IntegerType) {
                return new IntegralReader(Integer.MIN_VALUE, Integer.MAX_VALUE, 'i');
            }
            if (type instanceof LongType) {
                return new IntegralReader(Long.MIN_VALUE, Long.MAX_VALUE, 'l');
            }
            if (type instanceof FloatType) {
                return new FloatingReader(true);
            }
            if (type instanceof DoubleType) {
                return new FloatingReader(false);
            }
            if (type instanceof DecimalType) {
                DecimalType decimal = (DecimalType) type;
                return new DecimalReader(decimal.precision(), decimal.scale());
            }
            if (type instanceof BinaryType) {
                return new BinaryReader();
            }
            if (type instanceof DateType) {
                return new DateReader();
            }
            if (type instanceof TimestampType) {
                return new TimestampReader(zone, timeFormat == null ? "iso" : timeFormat, false);
            }
            if (type instanceof TimestampNTZType) {
                return new TimestampReader(zone, timeFormat == null ? "iso" : timeFormat, true);
            }
            throw new IllegalArgumentException("RecordDecoder: unsupported type " + type.simpleString() + " at "
                    + (path.isEmpty() ? "the top level" : path));
        }
    }

    /** A JSON object into a struct: declared keys typed, undeclared ones rescued, required ones checked. */
    static final class StructReader extends Reader {
        private final String[] names;
        private final String[] fieldNames;
        private final Reader[] readers;
        private final boolean[] required;
        private final boolean[] evolved;
        private final String[] fields;  // each field's path without array indexes and map keys (items[].qty)
        private final Map<String, Integer> index = new HashMap<>();
        private final String path;

        StructReader(StructType type, String path, ZoneId zone, boolean top) {
            this(type, path, zone, top, null);
        }

        StructReader(StructType type, String path, ZoneId zone, boolean top, String timeFormat) {
            this.path = path;
            StructField[] fields = type.fields();
            names = new String[fields.length];
            fieldNames = new String[fields.length];
            readers = new Reader[fields.length];
            required = new boolean[fields.length];
            evolved = new boolean[fields.length];
            this.fields = new String[fields.length];
            for (int i = 0; i < fields.length; i++) {
                StructField field = fields[i];
                Metadata meta = field.metadata();
                fieldNames[i] = field.name();
                names[i] = join(path, field.name());
                this.fields[i] = names[i];
                String key = meta.contains("lakeline_json_name") ? meta.getString("lakeline_json_name") : field.name();
                index.put(key, i);
                readers[i] = Reader.of(field.dataType(), meta, names[i], zone, timeFormat);
                required[i] = top ? meta.contains("lakeline_required") && meta.getBoolean("lakeline_required")
                        : !field.nullable();
                evolved[i] = meta.contains("lakeline_evolved") && meta.getBoolean("lakeline_evolved");
            }
        }

        private String[] relative(String at) {
            String[] out = new String[fieldNames.length];
            for (int i = 0; i < out.length; i++) {
                out[i] = join(at, fieldNames[i]);
            }
            return out;
        }

        /** A key as one path step: quoted in backticks when it holds `.`, `[` or `]` (never read as a path). */
        static String pathKey(String key) {
            return key.indexOf('.') < 0 && key.indexOf('[') < 0 && key.indexOf(']') < 0 && key.indexOf('`') < 0
                    ? key : "`" + key.replace("`", "``") + "`";
        }

        static String join(String path, String name) {
            return path.isEmpty() ? name : path + "." + name;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String at) throws IOException {
            if (token != JsonToken.START_OBJECT) {
                return ctx.mismatch(at, parser);
            }
            return readObject(parser, ctx, at);
        }

        /** The parser at START_OBJECT; leaves it at the matching END_OBJECT. */
        Object readObject(JsonParser parser, Context ctx, String at) throws IOException {
            // Under an array the path has element indexes (items[3].sku): names are then built per record.
            String[] names = at.equals(path) ? this.names : relative(at);
            Object[] values = new Object[names.length];
            boolean[] seen = new boolean[names.length];
            Map<String, Boolean> undeclared = null;
            JsonToken token;
            while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
                String key = parser.currentName();
                Integer i = index.get(key);
                JsonToken value = parser.nextToken();
                if (i == null) {
                    if (undeclared == null) {
                        undeclared = new HashMap<>();
                    }
                    if (undeclared.put(key, Boolean.TRUE) != null && ctx.malformed == null) {
                        ctx.malformed = "repeated key: " + join(at, key);
                    }
                    ctx.rescueUndeclared(join(at, pathKey(key)), ctx.copy(parser));
                    continue;
                }
                if (seen[i] && ctx.malformed == null) {
                    ctx.malformed = "repeated key: " + names[i];
                }
                seen[i] = true;
                if (value == JsonToken.VALUE_NULL) {
                    values[i] = null;
                } else if (evolved[i]) {
                    // A field schema evolution added: a value that does not fit it is a schema violation.
                    int before = ctx.mismatched.size();
                    values[i] = readers[i].read(parser, value, ctx, names[i]);
                    ctx.settle(names[i], fields[i]);
                    if (ctx.mismatched.size() > before) {
                        ctx.moveNewestMismatches(before);
                    }
                } else {
                    values[i] = readers[i].read(parser, value, ctx, names[i]);
                    if (!required[i]) {
                        ctx.settle(names[i], fields[i]);
                    }
                }
            }
            if (token != JsonToken.END_OBJECT) {
                throw new IOException("unexpected " + token + " in an object");
            }
            for (int i = 0; i < names.length; i++) {
                if (required[i] && values[i] == null && !ctx.mismatched.containsKey(names[i])) {
                    ctx.missing.add(names[i]);
                }
            }
            return RowFactory.create(values);
        }
    }

    static final class ArrayReader extends Reader {
        private final Reader element;
        private final String field;

        ArrayReader(Reader element, String field) {
            this.element = element;
            this.field = field;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.START_ARRAY) {
                return ctx.mismatch(path, parser);
            }
            List<Object> out = new ArrayList<>();
            JsonToken next;
            while ((next = parser.nextToken()) != JsonToken.END_ARRAY) {
                if (next == null) {
                    throw new IOException("unexpected end of input in an array");
                }
                String at = path + "[" + out.size() + "]";
                out.add(next == JsonToken.VALUE_NULL ? null : element.read(parser, next, ctx, at));
                ctx.settle(at, field);
            }
            return out;
        }
    }

    static final class MapReader extends Reader {
        private final Reader value;
        private final String field;

        MapReader(Reader value, String field) {
            this.value = value;
            this.field = field;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.START_OBJECT) {
                return ctx.mismatch(path, parser);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            JsonToken next;
            while ((next = parser.nextToken()) == JsonToken.FIELD_NAME) {
                String key = parser.currentName();
                JsonToken v = parser.nextToken();
                String at = StructReader.join(path, key);
                if (out.containsKey(key) && ctx.malformed == null) {
                    ctx.malformed = "repeated key: " + at;
                }
                out.put(key, v == JsonToken.VALUE_NULL ? null : value.read(parser, v, ctx, at));
                ctx.settle(at, field);
            }
            if (next != JsonToken.END_OBJECT) {
                throw new IOException("unexpected " + next + " in an object");
            }
            return out;
        }
    }

    /** Any JSON value, kept as its JSON text. */
    static final class JsonTextReader extends Reader {
        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            return ctx.copy(parser);
        }
    }

    static final class StringReader extends Reader {
        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            switch (token) {
                case VALUE_STRING:
                    return parser.getText();
                case VALUE_NUMBER_INT:
                case VALUE_NUMBER_FLOAT:
                case VALUE_TRUE:
                case VALUE_FALSE:
                    return parser.getText();  // a scalar as its JSON text, e.g. an id sent as a number
                default:
                    return ctx.mismatch(path, parser);
            }
        }
    }

    static final class BooleanReader extends Reader {
        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token == JsonToken.VALUE_TRUE) {
                return Boolean.TRUE;
            }
            if (token == JsonToken.VALUE_FALSE) {
                return Boolean.FALSE;
            }
            return ctx.mismatch(path, parser);
        }
    }

    static final class IntegralReader extends Reader {
        private final BigInteger min, max;
        private final char kind;

        IntegralReader(long min, long max, char kind) {
            this.min = BigInteger.valueOf(min);
            this.max = BigInteger.valueOf(max);
            this.kind = kind;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.VALUE_NUMBER_INT) {
                return ctx.mismatch(path, parser);
            }
            BigInteger value = parser.getBigIntegerValue();
            if (value.compareTo(min) < 0 || value.compareTo(max) > 0) {
                return ctx.mismatch(path, parser);
            }
            switch (kind) {
                case 'b': return value.byteValue();
                case 's': return value.shortValue();
                case 'i': return value.intValue();
                default: return value.longValue();
            }
        }
    }

    static final class FloatingReader extends Reader {
        private final boolean single;

        FloatingReader(boolean single) {
            this.single = single;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.VALUE_NUMBER_INT && token != JsonToken.VALUE_NUMBER_FLOAT) {
                return ctx.mismatch(path, parser);
            }
            String text = parser.getText();
            double value = Double.parseDouble(text);
            boolean zeroDigits = new BigDecimal(text).signum() == 0;
            if (single) {
                float narrow = (float) value;
                if (Float.isInfinite(narrow) || (narrow == 0.0f && !zeroDigits)) {
                    return ctx.mismatch(path, parser);  // overflow, or a non-zero number that underflows to 0
                }
                return narrow;
            }
            if (Double.isInfinite(value) || (value == 0.0 && !zeroDigits)) {
                return ctx.mismatch(path, parser);
            }
            return value;
        }
    }

    static final class DecimalReader extends Reader {
        private static final int MAX_DECIMAL_TEXT = 100;  // a decimal(38,s) needs at most ~80 characters
        private final int precision, scale;

        DecimalReader(int precision, int scale) {
            this.precision = precision;
            this.scale = scale;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            BigDecimal value;
            if (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT) {
                value = new BigDecimal(parser.getText());
            } else if (token == JsonToken.VALUE_STRING && parser.getTextLength() <= MAX_DECIMAL_TEXT) {
                try {
                    value = new BigDecimal(parser.getText().trim());  // money is often sent as a string
                } catch (NumberFormatException notANumber) {
                    return ctx.mismatch(path, parser);
                }
            } else {
                return ctx.mismatch(path, parser);
            }
            // Decide on the digits before any rescaling: `1e300000000` must not make Java compute 10^300000000.
            BigDecimal digits = value.signum() == 0 ? BigDecimal.ZERO : value.stripTrailingZeros();
            if (digits.scale() > scale || digits.precision() - digits.scale() > precision - scale) {
                return ctx.mismatch(path, parser);  // would round, or too many integer digits
            }
            return digits.setScale(scale, RoundingMode.UNNECESSARY);
        }
    }

    static final class BinaryReader extends Reader {
        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.VALUE_STRING) {
                return ctx.mismatch(path, parser);
            }
            String text = parser.getText();
            try {
                return Base64.getDecoder().decode(text);
            } catch (IllegalArgumentException notStandard) {
                try {
                    return Base64.getUrlDecoder().decode(text);
                } catch (IllegalArgumentException notBase64) {
                    return ctx.mismatch(path, parser);
                }
            }
        }
    }

    static final class DateReader extends Reader {
        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            if (token != JsonToken.VALUE_STRING) {
                return ctx.mismatch(path, parser);
            }
            Option<Object> days = DateTimeUtils.stringToDate(UTF8String.fromString(parser.getText()));
            return days.isDefined() ? LocalDate.ofEpochDay((Integer) days.get()) : ctx.mismatch(path, parser);
        }
    }

    static final class TimestampReader extends Reader {
        private static final BigDecimal MILLION = BigDecimal.valueOf(1_000_000L), THOUSAND = BigDecimal.valueOf(1000L);
        private final ZoneId zone;
        private final String format;
        private final boolean local;

        TimestampReader(ZoneId zone, String format, boolean local) {
            this.zone = zone;
            this.format = format;
            this.local = local;
        }

        @Override
        Object read(JsonParser parser, JsonToken token, Context ctx, String path) throws IOException {
            Long micros = null;
            if (token == JsonToken.VALUE_STRING && "iso".equals(format)) {
                String value = parser.getText();
                micros = local ? null : utcMicros(value);
                if (micros == null) {
                    UTF8String text = UTF8String.fromString(value);
                    Option<Object> parsed = local ? DateTimeUtils.stringToTimestampWithoutTimeZone(text)
                            : DateTimeUtils.stringToTimestamp(text, zone);
                    micros = parsed.isDefined() ? (Long) parsed.get() : null;
                }
            } else if (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT) {
                micros = epochMicros(new BigDecimal(parser.getText()), token == JsonToken.VALUE_NUMBER_INT);
            }
            if (micros == null) {
                return ctx.mismatch(path, parser);
            }
            if (local) {
                return LocalDateTime.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
                        (int) Math.floorMod(micros, 1_000_000L) * 1000, ZoneOffset.UTC);
            }
            return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000L);
        }

        /**
         * Epoch microseconds of {@code value} when it is exactly {@code yyyy-MM-ddTHH:mm:ss[.f]Z} with 1-6 fraction
         * digits and a valid date and time, else null (Spark's general parser then decides, so the result is always
         * Spark's). Most producers send this form, and Spark's parser builds a ZonedDateTime for every value: about
         * 3 % of a Delta drain's task time (bench/results/drain-profile-2026-11-28.md).
         */
        static Long utcMicros(String value) {
            int length = value.length();
            if (length < 20 || length > 27 || length == 21 || value.charAt(length - 1) != 'Z'
                    || value.charAt(4) != '-' || value.charAt(7) != '-' || value.charAt(10) != 'T'
                    || value.charAt(13) != ':' || value.charAt(16) != ':' || (length > 20 && value.charAt(19) != '.')) {
                return null;
            }
            int year = digits(value, 0, 4), month = digits(value, 5, 2), day = digits(value, 8, 2);
            int hour = digits(value, 11, 2), minute = digits(value, 14, 2), second = digits(value, 17, 2);
            int fraction = length > 20 ? digits(value, 20, length - 21) : 0;
            if (year < 1 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59
                    || second < 0 || second > 59 || fraction < 0 || day > daysInMonth(year, month)) {
                return null;
            }
            for (int scale = length > 20 ? length - 21 : 6; scale < 6; scale++) {
                fraction *= 10;  // to microseconds
            }
            long days = LocalDate.of(year, month, day).toEpochDay();
            return (days * 86_400L + hour * 3_600L + minute * 60L + second) * 1_000_000L + fraction;
        }

        private static int daysInMonth(int year, int month) {
            if (month == 2) {
                return Year.isLeap(year) ? 29 : 28;
            }
            return month == 4 || month == 6 || month == 9 || month == 11 ? 30 : 31;
        }

        /** The decimal value of {@code count} ASCII digits at {@code from}; -1 if any is not a digit. */
        private static int digits(String value, int from, int count) {
            int result = 0;
            for (int i = from; i < from + count; i++) {
                char c = value.charAt(i);
                if (c < '0' || c > '9') {
                    return -1;
                }
                result = result * 10 + (c - '0');
            }
            return result;
        }

        /** A number in the field's epoch unit as microseconds; null if it has digits below a microsecond. */
        private Long epochMicros(BigDecimal number, boolean integral) {
            BigDecimal micros;
            switch (format) {
                case "iso":  // an integer is epoch seconds, as Spark reads it; a fraction is refused
                    if (!integral) {
                        return null;
                    }
                    micros = number.multiply(MILLION);
                    break;
                case "epoch_seconds":
                    micros = number.multiply(MILLION);
                    break;
                case "epoch_millis":
                    micros = number.multiply(THOUSAND);
                    break;
                case "epoch_micros":
                    micros = number;
                    break;
                default:
                    throw new IllegalStateException("time format " + format);
            }
            // Decide on the digits before any rescaling (a huge exponent must not be expanded).
            BigDecimal digits = micros.signum() == 0 ? BigDecimal.ZERO : micros.stripTrailingZeros();
            if (digits.scale() > 0 || digits.precision() - digits.scale() > 19) {
                return null;  // below a microsecond, or far outside a long
            }
            try {
                return digits.longValueExact();
            } catch (ArithmeticException outOfRange) {
                return null;
            }
        }
    }
}
