package tierengine.kafka;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.JMException;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * The engine's object-store metrics over JMX, under the Aiven plugin's object and attribute
 * names (the engine names them: broker_plugin.plugin_metrics). Values are read from the
 * engine at most once a second; beans appear as the engine first reports them (checked on
 * every read and every 30 s).
 */
final class EngineMetrics {
    private static final long MAX_AGE_NANOS = 1_000_000_000L;

    private final EngineRuntime runtime;
    private final long handle;
    private final EngineLog log;
    private final MBeanServer server = ManagementFactory.getPlatformMBeanServer();
    private final Set<ObjectName> registered = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService refresher;
    private volatile Map<String, Map<String, Double>> snapshot = Map.of();
    private volatile long takenAt;

    private EngineMetrics(EngineRuntime runtime, long handle, EngineLog log) {
        this.runtime = runtime;
        this.handle = handle;
        this.log = log;
        this.refresher = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "engine-rsm-metrics");
            t.setDaemon(true);
            return t;
        });
    }

    static EngineMetrics register(EngineRuntime runtime, long handle, EngineLog log) {
        EngineMetrics metrics = new EngineMetrics(runtime, handle, log);
        metrics.refresh();
        metrics.refresher.scheduleWithFixedDelay(metrics::refresh, 30, 30, TimeUnit.SECONDS);
        return metrics;
    }

    private synchronized Map<String, Map<String, Double>> current() {
        if (System.nanoTime() - takenAt > MAX_AGE_NANOS) {
            refresh();
        }
        return snapshot;
    }

    private synchronized void refresh() {
        Object rows;
        try {
            rows = runtime.call("plugin_metrics", handle);
        } catch (EngineException e) {
            log.warn("the engine's metrics could not be read: " + e.getMessage());
            return;
        }
        Map<String, Map<String, Double>> next = new TreeMap<>();
        for (Object item : (List<?>) rows) {
            List<?> row = (List<?>) item;
            next.computeIfAbsent(String.valueOf(row.get(0)), k -> new TreeMap<>())
                    .put(String.valueOf(row.get(1)), ((Number) row.get(2)).doubleValue());
        }
        snapshot = next;
        takenAt = System.nanoTime();
        for (String name : next.keySet()) {
            try {
                ObjectName objectName = new ObjectName(name);
                if (registered.add(objectName) && !server.isRegistered(objectName)) {
                    server.registerMBean(new Bean(name), objectName);
                }
            } catch (JMException e) {
                log.warn("metric bean " + name + " could not be registered: " + e);
            }
        }
    }

    void unregister() {
        refresher.shutdownNow();
        for (ObjectName name : registered) {
            try {
                server.unregisterMBean(name);
            } catch (JMException e) {
                // already gone
            }
        }
        registered.clear();
    }

    /** One object name's attributes, read from the latest snapshot. */
    private final class Bean implements DynamicMBean {
        private final String name;

        Bean(String name) {
            this.name = name;
        }

        private Map<String, Double> values() {
            return current().getOrDefault(name, Map.of());
        }

        @Override
        public Object getAttribute(String attribute) throws AttributeNotFoundException {
            Double value = values().get(attribute);
            if (value == null) {
                throw new AttributeNotFoundException(attribute);
            }
            return value;
        }

        @Override
        public void setAttribute(Attribute attribute) {
            throw new UnsupportedOperationException("read-only metrics");
        }

        @Override
        public AttributeList getAttributes(String[] attributes) {
            Map<String, Double> values = values();
            AttributeList list = new AttributeList();
            for (String a : attributes) {
                Double v = values.get(a);
                if (v != null) {
                    list.add(new Attribute(a, v));
                }
            }
            return list;
        }

        @Override
        public AttributeList setAttributes(AttributeList attributes) {
            return new AttributeList();
        }

        @Override
        public Object invoke(String action, Object[] params, String[] signature) {
            throw new UnsupportedOperationException("no operations");
        }

        @Override
        public MBeanInfo getMBeanInfo() {
            List<MBeanAttributeInfo> infos = new ArrayList<>();
            for (String a : values().keySet()) {
                infos.add(new MBeanAttributeInfo(a, "double", a, true, false, false));
            }
            return new MBeanInfo(EngineMetrics.class.getName(), "engine metrics " + name,
                    infos.toArray(new MBeanAttributeInfo[0]), null, null, null);
        }
    }
}
