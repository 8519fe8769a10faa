package io.lakeline.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneId;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * One JSON pass over a raw record that is plainly clean: a UTF-8 object, within the size limit, whose keys are
 * declared fields, each once, each value of its declared type and not null, every required field present, nothing
 * after the object. For such a record it returns the typed values, exactly as Spark's {@code from_json} into the
 * declared struct would give them; for every other record it returns null, and Lakeline's decode
 * (ingest/transforms.py) classifies it with Spark's own functions, as before.
 *
 * <p>Only values whose conversion is unambiguous are accepted, each with the call {@code from_json} makes:
 * strings as {@code VALUE_STRING}; int / long only when the number fits; double from any JSON number
 * ({@code getDoubleValue}); booleans; timestamps as a string {@code DateTimeUtils.stringToTimestamp} parses in the
 * session time zone (what Spark's default timestamp formatter does) or an integer of epoch seconds; dates as a
 * string {@code DateTimeUtils.stringToDate} parses. Anything else (a JSON extension Spark tolerates, a string in a
 * number field, a number Jackson would have to coerce) falls back. The fallback is always safe: it is the exact path.
 */
public final class CleanRecordDecoder implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    private static final int STRING = 0, INT = 1, LONG = 2, DOUBLE = 3, BOOLEAN = 4, TIMESTAMP = 5, DATE = 6;

    private final String[] names;
    private final int[] types;
    private final boolean[] required;
    private final long maxBytes;
    private final String timeZone;

    private transient JsonFactory factory;
    private transient Map<String, Integer> index;
    private transient ZoneId zoneId;

    /**
     * @param spec JSON: {"fields": [{"name": ..., "type": "string|int|long|double|boolean|timestamp|date",
     *             "required": true|false}, ...], "max_bytes": N, "time_zone": "UTC"}
     */
    public CleanRecordDecoder(String spec) {
        JsonNode root;
        try {
            root = new ObjectMapper().readTree(spec);
        } catch (IOException e) {
            throw new UncheckedIOException("CleanRecordDecoder: spec is not JSON: " + spec, e);
        }
        JsonNode fields = root.get("fields");
        int n = fields.size();
        names = new String[n];
        types = new int[n];
        required = new boolean[n];
        for (int i = 0; i < n; i++) {
            JsonNode field = fields.get(i);
            names[i] = field.get("name").asText();
            types[i] = typeCode(field.get("type").asText());
            required[i] = field.get("required").asBoolean();
        }
        maxBytes = root.get("max_bytes").asLong();
        timeZone = root.get("time_zone").asText();
        DateTimeUtils.getZoneId(timeZone);  // refuse a zone Spark would not take, here rather than in a task
    }

    private static int typeCode(String type) {
        switch (type) {
            case "string": return STRING;
            case "int": return INT;
            case "long": return LONG;
            case "double": return DOUBLE;
            case "boolean": return BOOLEAN;
            case "timestamp": return TIMESTAMP;
            case "date": return DATE;
            default: throw new IllegalArgumentException("CleanRecordDecoder: unsupported field type " + type);
        }
    }

    private void init() {
        if (factory == null) {
            factory = new JsonFactory();  // strict JSON: anything Spark's lenient reader also accepts falls back
            index = new HashMap<>();
            for (int i = 0; i < names.length; i++) {
                index.put(names[i], i);
            }
            zoneId = DateTimeUtils.getZoneId(timeZone);  // Spark's reading of the session time zone
        }
    }

    @Override
    public Row call(byte[] raw) {
        if (raw == null || raw.length > maxBytes || !validUtf8(raw)) {
            return null;
        }
        init();
        Object[] values = new Object[names.length];
        boolean[] seen = new boolean[names.length];
        try (JsonParser parser = factory.createParser(raw)) {
            if (parser.nextToken() != JsonToken.START_OBJECT) {
                return null;
            }
            JsonToken token;
            while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
                Integer i = index.get(parser.currentName());
                if (i == null || seen[i]) {
                    return null;  // undeclared or repeated key
                }
                seen[i] = true;
                Object value = convert(parser, parser.nextToken(), types[i]);
                if (value == null) {
                    return null;  // null, or not plainly of the declared type
                }
                values[i] = value;
            }
            if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
                return null;  // trailing content after the object
            }
        } catch (IOException notPlainJson) {
            // Malformed, or outside the strict reader's limits: not clean, so the exact path decides.
            return null;
        }
        for (int i = 0; i < names.length; i++) {
            if (required[i] && !seen[i]) {
                return null;
            }
        }
        return RowFactory.create(values);
    }

    private static boolean validUtf8(byte[] raw) {
        for (byte b : raw) {
            if (b < 0) {
                return UTF8String.fromBytes(raw).isValid();  // Spark's own check (is_valid_utf8)
            }
        }
        return true;
    }

    private Object convert(JsonParser parser, JsonToken token, int type) throws IOException {
        switch (type) {
            case STRING:
                return token == JsonToken.VALUE_STRING ? parser.getText() : null;
            case INT:
                return token == JsonToken.VALUE_NUMBER_INT && parser.getNumberType() == JsonParser.NumberType.INT
                        ? (Object) parser.getIntValue() : null;
            case LONG:
                return token == JsonToken.VALUE_NUMBER_INT && fitsLong(parser) ? (Object) parser.getLongValue() : null;
            case DOUBLE:
                return token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT
                        ? (Object) parser.getDoubleValue() : null;
            case BOOLEAN:
                return token == JsonToken.VALUE_TRUE ? Boolean.TRUE : token == JsonToken.VALUE_FALSE ? Boolean.FALSE : null;
            case TIMESTAMP:
                if (token == JsonToken.VALUE_STRING) {
                    Option<Object> micros = DateTimeUtils.stringToTimestamp(UTF8String.fromString(parser.getText()), zoneId);
                    return micros.isDefined() ? instant((Long) micros.get()) : null;
                }
                // Spark reads a JSON integer as epoch seconds (and multiplies without an overflow check).
                return token == JsonToken.VALUE_NUMBER_INT && fitsLong(parser)
                        ? instant(parser.getLongValue() * 1000000L) : null;
            case DATE:
                if (token == JsonToken.VALUE_STRING) {
                    Option<Object> days = DateTimeUtils.stringToDate(UTF8String.fromString(parser.getText()));
                    return days.isDefined() ? LocalDate.ofEpochDay((Integer) days.get()) : null;
                }
                return null;
            default:
                throw new IllegalStateException("type code " + type);
        }
    }

    private static boolean fitsLong(JsonParser parser) throws IOException {
        JsonParser.NumberType kind = parser.getNumberType();
        return kind == JsonParser.NumberType.INT || kind == JsonParser.NumberType.LONG;
    }

    private static Instant instant(long micros) {
        return Instant.ofEpochSecond(Math.floorDiv(micros, 1000000L), Math.floorMod(micros, 1000000L) * 1000L);
    }
}
