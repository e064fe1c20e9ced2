// A bridge for Kafka Connect's FileStream connectors (issue 40's Connect scenario), never used by
// the product: connect-file 4.4.0 is not on the Maven Central this project reaches, and 4.3.0's
// connectors call org.apache.kafka.common.utils.AppInfoParser.getVersion(), which kafka-clients
// 4.4.0 moved to ...utils.internals. This class puts the old name back for them, answering what
// the new one does. Compiled by tests/reference/kafka_ref.py onto the Connect worker's classpath.
package org.apache.kafka.common.utils;

public class AppInfoParser {
    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }

    public static String getCommitId() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getCommitId();
    }
}
