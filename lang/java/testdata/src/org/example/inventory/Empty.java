// A file with no type: javac accepts it.
package org.example.inventory;

import java.util.List;
;
