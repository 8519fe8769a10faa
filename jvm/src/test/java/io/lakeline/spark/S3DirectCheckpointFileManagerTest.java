package io.lakeline.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.lakeline.testing.ConditionalPutFileSystem;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Spark's checkpoint entries on s3a:// as one PUT each, with the exists-check Spark's metadata log relies on. */
class S3DirectCheckpointFileManagerTest {

    @TempDir
    java.nio.file.Path root;

    private S3DirectCheckpointFileManager manager;

    @BeforeEach
    void setUp() {
        Configuration conf = ConditionalPutFileSystem.configuration(root);
        manager = new S3DirectCheckpointFileManager(new Path("s3a://bucket/checkpoint"), conf);
    }

    private static void write(FSDataOutputStream out, String text) throws IOException {
        out.write(text.getBytes(StandardCharsets.UTF_8));
        out.close();
    }

    private java.nio.file.Path object(String key) {
        return root.resolve("bucket/checkpoint/" + key);
    }

    @Test
    void writesTheEntryItselfWithOnePutAndNoTemporaryFile() throws IOException {
        int before = ConditionalPutFileSystem.PUTS.get();
        write(manager.createAtomic(new Path("s3a://bucket/checkpoint/offsets/0"), false), "v1");
        assertEquals("v1", Files.readString(object("offsets/0")));
        assertEquals(1, ConditionalPutFileSystem.PUTS.get() - before);
        try (var files = Files.list(object("offsets"))) {
            assertEquals(1, files.count(), "no temporary file is left beside the entry");
        }
    }

    @Test
    void refusesAnEntryThatExistsAsSparksMetadataLogExpects() throws IOException {
        Path entry = new Path("s3a://bucket/checkpoint/commits/0");
        write(manager.createAtomic(entry, false), "first");
        FSDataOutputStream second = manager.createAtomic(entry, false);
        second.write("second".getBytes(StandardCharsets.UTF_8));
        FileAlreadyExistsException refused = assertThrows(FileAlreadyExistsException.class, second::close);
        assertEquals("s3a://bucket/checkpoint/commits/0 already exists", refused.getMessage());
        assertEquals("first", Files.readString(object("commits/0")));
    }

    @Test
    void overwritesWhenAllowed() throws IOException {
        Path entry = new Path("s3a://bucket/checkpoint/metadata");
        write(manager.createAtomic(entry, true), "old");
        write(manager.createAtomic(entry, true), "new");
        assertEquals("new", Files.readString(object("metadata")));
    }

    @Test
    void aCancelledEntryUploadsNothing() throws IOException {
        var out = manager.createAtomic(new Path("s3a://bucket/checkpoint/offsets/1"), false);
        out.write("half".getBytes(StandardCharsets.UTF_8));
        out.cancel();
        out.close();  // after cancel, close must not upload either
        assertFalse(Files.exists(object("offsets/1")));
    }
}
