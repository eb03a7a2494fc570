/** Items and their stores. */
@javax.annotation.processing.Generated("fixture")
package org.example.inventory;
